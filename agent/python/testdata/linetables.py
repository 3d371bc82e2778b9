"""Records line tables and the lines CPython itself gives each instruction,
for agent/python's line-table tests (linetable_test.go). Run with each
interpreter:  python3.X linetables.py > linetables-3.X.json

The expected lines come from the interpreter's own decoders: code.co_lines()
on 3.10+, dis.findlinestarts() on 3.9. Code objects are taken from a few
standard-library modules (long functions, regular expressions, loops) and from SOURCE below
(big line jumps, multi-line expressions, async code, exception handling).
"""
import dis
import json
import sys

SOURCE = '''
def far_jump():
    x = 1
''' + "\n" * 300 + '''
    return x

def multi_line(a,
               b):
    return (a +
            b *
            2)

async def coro(xs):
    async for x in xs:
        await x
    return [y for y in range(3) if y]

def handler():
    try:
        1 / 0
    except ZeroDivisionError as e:
        raise ValueError() from e
    finally:
        pass
'''

def codes(co):
    yield co
    for c in co.co_consts:
        if hasattr(c, "co_code"):
            yield from codes(c)

def expected(co):
    n = len(co.co_code)
    lines = {}
    if sys.version_info >= (3, 10):
        for start, end, line in co.co_lines():
            for off in range(start, end, 2):
                lines[off] = line if line is not None else 0
    else:
        starts = list(dis.findlinestarts(co))
        for off in range(0, n, 2):
            line = co.co_firstlineno
            for s, l in starts:
                if s <= off:
                    line = l
            lines[off] = line
    return [lines.get(off, 0) for off in range(0, n, 2)]

def main():
    import json.decoder, textwrap
    roots = [compile(SOURCE, "source.py", "exec")]
    for m in (json.decoder, textwrap):
        with open(m.__file__) as f:
            roots.append(compile(f.read(), m.__file__, "exec"))
    out = []
    for r in roots:
        for co in codes(r):
            table = co.co_lnotab if sys.version_info < (3, 10) else co.co_linetable
            out.append({"name": co.co_name, "first": co.co_firstlineno,
                        "table": table.hex(), "lines": expected(co)})  # lines[i]: instruction at byte 2*i; 0: none
    json.dump({"version": "%d.%d" % sys.version_info[:2], "codes": out}, sys.stdout, separators=(",", ":"))

main()
