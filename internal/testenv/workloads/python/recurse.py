import sys
import time


def spin(end):
    x = 0
    while time.process_time() < end:
        x += 1


def recurse(n, end):
    if n == 0:
        spin(end)
    else:
        recurse(n - 1, end)


def main(secs):
    print("ready", flush=True)
    recurse(200, time.process_time() + secs)


main(float(sys.argv[1]))
