import multiprocessing
import sys
import time


def work_item(n):
    # A fixed amount of work (not of time): 16 workers share the CPUs.
    # Returns the CPU time the loop took: what the profile's share of
    # work_item is held to (forking costs far more on some hosts).
    start = time.process_time()
    x = 0
    for _ in range(n):
        x += 1
    return time.process_time() - start


def main(iters):
    # fork, as on Linux by default before 3.14: each worker is a copy of
    # this process, started after the profiler was.
    ctx = multiprocessing.get_context("fork")
    print("ready", flush=True)
    # What a job does before it forks its workers (a DataLoader's dataset
    # and model are built first): the agent loads the parent meanwhile, and
    # its workers inherit that. A worker forked before it is loaded on its
    # own, and its first samples get frame-pointer stacks (counted).
    setup = time.process_time() + 0.3
    while time.process_time() < setup:
        pass
    with ctx.Pool(16) as pool:
        spent = pool.map(work_item, [iters] * 16, chunksize=1)
    print(f"measured work_item {sum(spent):.6f}", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
