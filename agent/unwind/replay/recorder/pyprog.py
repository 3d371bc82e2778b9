# The CPython workload of the replay recorder: a stack of methods and
# functions, one of them called back from C (map), stopped by SIGSTOP in
# its leaf; just before (on the same line, so with the same line number)
# it writes the stack it sees itself, innermost first, for the recorder to
# hold the resolved frames to. Run with -I -S: no site, no environment.
import os
import signal
import sys


def dump(path):
    out = []
    f = sys._getframe(1)
    while f is not None:
        c = f.f_code
        out.append("%s\t%s\t%d\n" % (getattr(c, "co_qualname", c.co_name), c.co_filename, f.f_lineno))
        f = f.f_back
    with open(path, "w") as fh:
        fh.write("".join(out))


class Worker:
    def __init__(self, path):
        self.path = path

    def leaf(self, x):
        dump(self.path); os.kill(os.getpid(), signal.SIGSTOP)  # noqa: E702 (one line: one line number)
        return x

    def key(self, x):
        return self.leaf(x) + 1


def outer(path):
    w = Worker(path)
    return list(map(w.key, [1]))


def main():
    return outer(sys.argv[1])


main()
