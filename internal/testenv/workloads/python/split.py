import random
import sys
import time


def hot_a(n):
    x = 0
    for _ in range(7 * n):
        x += 1
    return x


def hot_b(n):
    x = 0
    for _ in range(3 * n):
        x += 1
    return x


def main(secs):
    rnd = random.Random()
    end = time.process_time() + secs
    print("ready", flush=True)
    while time.process_time() < end:
        # A round lasts about 1-10 ms: long against a call, and random so
        # that sampling cannot alias with it.
        n = rnd.randint(2000, 20000)
        hot_a(n)
        hot_b(n)


main(float(sys.argv[1]))
