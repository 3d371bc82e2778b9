import ctypes
import sys
import time

# The TEST STAND-IN CUDA runtime (internal/testenv/cudastandin): launches go
# through the mock CUPTI to the injection library named by
# CUDA_INJECTION64_PATH, as real CUDA calls would.
cudart = ctypes.CDLL(sys.argv[1])
cudart.standin_launch.argtypes = [ctypes.c_char_p, ctypes.c_uint32]
cudart.standin_launch.restype = ctypes.c_uint32


class Linear:
    def forward(self):
        cudart.standin_launch(b"gemm_kernel", 0)


class Model:
    def __init__(self):
        self.fc = Linear()

    def forward(self):
        self.fc.forward()

    def backward(self):
        cudart.standin_launch(b"reduce_kernel", 0)
        cudart.standin_launch(b"reduce_kernel", 0)


def train_step(model):
    model.forward()
    model.backward()


def setup(secs):
    # What a training job does before its first kernel (import torch,
    # build the model, load data; seconds in a real one): the agent loads
    # a new process's tables and interpreter state in that time, and a
    # launch before it gets frame-pointer stacks (counted).
    end = time.process_time() + secs
    x = 0
    while time.process_time() < end:
        x += 1


def main(secs):
    cudart.standin_init()
    model = Model()
    setup(0.3)
    # secs of this thread's CPU time, not wall time: on a busy host (CI's
    # parallel packages) 1.5 s of wall time once left 18 CPU samples
    # under train_step instead of about 100.
    end = time.thread_time() + secs
    print("ready", flush=True)
    steps = 0
    while time.thread_time() < end:
        train_step(model)
        steps += 1
        if steps % 50 == 0:
            time.sleep(0.002)  # a job that does more than launch
    print("steps", steps, flush=True)


main(float(sys.argv[2]))
