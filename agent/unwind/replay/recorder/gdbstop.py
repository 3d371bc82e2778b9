# Run by the replay recorder inside gdb (gdb -batch -x gdbstop.py, with
# REPLAY_CFG set by an -ex before it): runs the workload to its stop
# point, writes the registers and gdb's own backtrace (its DWARF unwinder
# over the full files: the reference the replay is held to) to cfg["out"],
# prints a line the recorder waits for, and keeps the process stopped
# until cfg["go"] exists, while the recorder copies its memory.
import json
import os
import time

import gdb

cfg = json.load(open(REPLAY_CFG))  # noqa: F821 (defined by the recorder's -ex)
for c in [
    "set pagination off",
    "set confirm off",
    "set startup-with-shell off",
    "set disable-randomization on",
    "set breakpoint pending on",
    "set backtrace past-main on",
    "set backtrace limit 4000",
    "unset environment LINES",
    "unset environment COLUMNS",
] + cfg["setup"]:
    gdb.execute(c)
gdb.execute("run")
for c in cfg["after"]:
    gdb.execute(c)

inf = gdb.selected_inferior()
if inf.pid == 0:
    raise gdb.GdbError("the workload exited before its stop point")
if cfg.get("signal"):
    signo = int(gdb.parse_and_eval("$_siginfo.si_signo"))
    if signo != cfg["signal"]:
        raise gdb.GdbError("stopped by signal %d, want %d" % (signo, cfg["signal"]))


def reg(f, name):
    try:
        v = f.read_register(name)
        if v.is_optimized_out:
            return None
        return int(v) & 0xFFFFFFFFFFFFFFFF
    except gdb.error:
        return None


frames = []
f = gdb.newest_frame()
while f is not None:
    if f.type() not in (gdb.INLINE_FRAME, gdb.TAILCALL_FRAME):
        frames.append({
            "pc": f.pc(),
            "sp": reg(f, "rsp"),
            "bp": reg(f, "rbp"),
            "fn": f.name() or "",
            "signal": f.type() == gdb.SIGTRAMP_FRAME,
        })
    f = f.older()

top = gdb.newest_frame()
out = {
    "pid": inf.pid,
    "tid": gdb.selected_thread().ptid[1],
    "pc": top.pc(),
    "sp": reg(top, "rsp"),
    "bp": reg(top, "rbp"),
    "fs_base": int(gdb.parse_and_eval("(unsigned long)$fs_base")),
    "frames": frames,
}
with open(cfg["out"] + ".tmp", "w") as fh:
    json.dump(out, fh)
os.rename(cfg["out"] + ".tmp", cfg["out"])
print("REPLAY-STOPPED", flush=True)
deadline = time.time() + 300
while not os.path.exists(cfg["go"]) and time.time() < deadline:
    time.sleep(0.02)
gdb.execute("kill")
