"""A small PyTorch CPU training loop (Debian's python3-torch), one thread.

Runs for the seconds of CPU time given as its first argument; prints
`ready` once the model is built. Not for the stack tests (it needs torch):
the agent bench's `--load torch`.
"""
import sys
import time

import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(512, 1024)
        self.fc2 = torch.nn.Linear(1024, 512)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def train_step(model, opt, x, y):
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main(secs):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 512), torch.randn(64, 512)
    end = time.process_time() + secs
    print("ready", flush=True)
    while time.process_time() < end:
        train_step(model, opt, x, y)


if __name__ == "__main__":
    main(float(sys.argv[1]))
