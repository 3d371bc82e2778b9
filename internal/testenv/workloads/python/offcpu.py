"""Blocks off the CPU in two Python functions for known times: wait_a
sleeps (time.sleep) and wait_b waits on a queue that a thread feeds, in
a 70/30 split of the time blocked, for the off-CPU tests. Prints "ready",
starts at a line on stdin, then prints "measured wait_a <s>" and
"measured wait_b <s>".

    offcpu.py <rounds>
"""
import queue
import sys
import threading
import time

asks = queue.Queue()
answers = queue.Queue()


def feeder():
    while asks.get():
        time.sleep(0.003)
        answers.put(1)


def wait_a():
    t0 = time.monotonic()
    time.sleep(0.007)
    return time.monotonic() - t0


def wait_b():
    t0 = time.monotonic()
    asks.put(1)
    answers.get()
    return time.monotonic() - t0


def main(rounds):
    a = b = 0.0
    for _ in range(rounds):
        a += wait_a()
        b += wait_b()
    return a, b


if __name__ == "__main__":
    threading.Thread(target=feeder, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.readline()
    a, b = main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
    asks.put(0)
    print("measured wait_a %f" % a, flush=True)
    print("measured wait_b %f" % b, flush=True)
