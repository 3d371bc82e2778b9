"""A hostile job's Python (e2e/hostile_python_test.go): it points the names
of the code objects it runs at pages of a file on its own FUSE mount, whose
daemon never answers a read (internal/testenv/workloads/stallfs.c), so that
an agent that reads them waits forever.

    python3 fuse_names.py FILE

- From the start, a thread runs Names.refused, whose co_qualname points
  into a mapping of FILE: a file-backed mapping the agent must not read.
- It prints "ready" and waits for a line on stdin (the test sends one once
  the agent has set the process up and seen the first attack), then maps
  FILE over anonymous memory it had touched (MAP_FIXED), which the agent's
  view of its maps still calls anonymous, prints "swapped", and runs
  Names.swapped, whose co_qualname points there. Neither page is ever
  touched by this process: only a reader of its memory would fault them
  in, and wait.

It never returns; the test kills it. CPython 3.11+ (co_qualname).
"""
import ctypes
import os
import sys
import threading

PROT_READ, PROT_WRITE = 1, 2
MAP_PRIVATE, MAP_FIXED, MAP_ANONYMOUS = 0x02, 0x10, 0x20
SIZE = 4 * 4096

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]


def mmap(addr, prot, flags, fd):
    p = libc.mmap(addr, SIZE, prot, flags, fd, 0)
    if p in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    return p


class Names:
    def refused(self):
        x = 0
        while True:
            x += 1

    def swapped(self):
        x = 0
        while True:
            x += 1


def aim(fn, addr):
    """Points fn's co_qualname (found by its value: no header needed) at addr."""
    code = fn.__code__
    want = id(code.co_qualname)
    for off in range(16, 512, 8):
        field = ctypes.c_void_p.from_address(id(code) + off)
        if field.value == want:
            field.value = addr
            return
    raise SystemExit("co_qualname not found in the code object")


def main(path):
    fd = os.open(path, os.O_RDONLY)
    # Made before the process is set up, so that the agent knows where
    # they are: anonymous memory, touched, and the code object to run there.
    anon = mmap(None, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1)
    ctypes.memset(anon, 0x41, SIZE)
    swapped = Names().swapped
    refused = Names().refused
    aim(refused, mmap(None, PROT_READ, MAP_PRIVATE, fd) + 64)
    threading.Thread(target=refused, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.readline()
    mmap(anon, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd)
    aim(swapped, anon + 64)
    print("swapped", flush=True)
    swapped()


main(sys.argv[1])
