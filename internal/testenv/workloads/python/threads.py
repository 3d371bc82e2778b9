import hashlib
import sys
import threading
import time


def spin_main(end):
    x = 0
    while time.process_time() < end:
        for _ in range(10000):
            x += 1


def hash_worker(end, buf, started):
    print("worker", threading.get_native_id(), flush=True)
    started.set()
    while time.process_time() < end:
        # hashlib releases the GIL for buffers over 2 KiB: this thread
        # spends its time in OpenSSL, not in the interpreter.
        hashlib.sha256(buf).digest()


def main(secs):
    buf = b"x" * (8 << 20)
    end = time.process_time() + secs
    started = threading.Event()
    t = threading.Thread(target=hash_worker, args=(end, buf, started))
    t.start()
    started.wait()
    print("main", threading.get_native_id(), flush=True)
    print("ready", flush=True)
    spin_main(end)
    t.join()


main(float(sys.argv[1]))
