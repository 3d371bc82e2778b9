import multiprocessing
import sys
import time


def work_item(secs):
    end = time.monotonic() + secs
    x = 0
    while time.monotonic() < end:
        for _ in range(1000):
            x += 1
    return x


def main(secs):
    # fork, as on Linux by default before 3.14: each worker is a copy of
    # this process, started after the profiler was.
    ctx = multiprocessing.get_context("fork")
    print("ready", flush=True)
    with ctx.Pool(16) as pool:
        pool.map(work_item, [secs / 8] * 16, chunksize=1)


if __name__ == "__main__":
    main(float(sys.argv[1]))
