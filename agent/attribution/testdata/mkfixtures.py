#!/usr/bin/env python3
"""Writes testdata/proc, a fixture proc tree with one process per case.

The tree is committed; this script documents how it was made and rebuilds
it (python3 mkfixtures.py from this directory). Each process has the four
files the agent reads: stat, status, cgroup, environ.
"""
import os, shutil

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "proc")
HYBRID = b"12:pids:/\n11:freezer:/\n10:devices:/\n4:memory:/\n1:name=systemd:/\n"
V2 = b"0::/system.slice/slurmstepd.scope/"

def env(**kv):
    return b"".join(k.encode() + b"=" + (v if isinstance(v, bytes) else v.encode()) + b"\0" for k, v in kv.items())

BOB = dict(PATH="/usr/bin:/bin", SLURM_JOB_ID="4242", SLURM_JOB_NAME='train "llama" ✓',
           SLURM_JOB_USER="mallory", SLURM_JOB_ACCOUNT="physics", SLURM_JOB_PARTITION="gpu")

procs = {
    # pid: (comm, uid, cgroup, environ or None for "unreadable", start time)
    1:   (b"systemd", 0, HYBRID + b"0::/init.scope\n", env(HOME="/"), 1),
    2:   (b"kthreadd", 0, HYBRID + b"0::/\n", b"", 1),
    # A login shell that inherited SLURM_JOB_ID: not in a job.
    200: (b"bash", 1001, HYBRID + b"0::/user.slice/user-1001.slice/session-3.scope\n",
          env(SLURM_JOB_ID="4242", SLURM_JOB_NAME="hijack"), 500),
    # cgroup v2, job 4242 owned by bob (1001), whose env claims mallory.
    300: (b"slurmstepd", 0, HYBRID + V2 + b"job_4242/step_batch/slurm\n", env(PATH="/usr/sbin"), 1000),
    301: (b"bash", 1001, HYBRID + V2 + b"job_4242/step_batch/user/task_0\n", env(**BOB), 1001),
    302: (b"python3", 1001, HYBRID + V2 + b"job_4242/step_0/user/task_0\n", env(**BOB), 1010),
    303: (b"python3", 1001, HYBRID + V2 + b"job_4242/step_0/user/task_1\n", None, 1010),
    # The extern step's placeholder runs as root in every job; it started
    # first, so it is the job's oldest process. It must not make root the owner.
    304: (b"sleep", 0, HYBRID + V2 + b"job_4242/step_extern/user/task_special\n", b"", 999),
    305: (b"bash", 1001, HYBRID + V2 + b"job_4242/step_interactive/user/task_0\n",
          env(**dict(BOB, SLURM_JOB_NAME="interactive")), 1020),
    310: (b"slurmstepd", 0, HYBRID + V2 + b"job_4242/step_0/slurm\n", b"", 1009),
    # Multiple slurmd on one host: job 4300 runs on node-a and node-b.
    400: (b"python3", 1002, HYBRID + b"0::/system.slice/node-b_slurmstepd.scope/job_4300/step_0/user/task_0\n",
          env(SLURM_JOB_ID="4300", SLURM_JOB_NAME="multi", SLURM_JOB_ACCOUNT="bio", SLURM_JOB_PARTITION="cpu"), 2000),
    401: (b"slurmstepd", 0, HYBRID + b"0::/system.slice/node-b_slurmstepd.scope/job_4300/step_0/slurm\n", b"", 1999),
    402: (b"python3", 1002, HYBRID + b"0::/system.slice/node-a_slurmstepd.scope/job_4300/step_0/user/task_0\n",
          env(SLURM_JOB_ID="4300", SLURM_JOB_NAME="multi", SLURM_JOB_ACCOUNT="bio", SLURM_JOB_PARTITION="cpu"), 2001),
    # cgroup v1 on every controller, and multiple-slurmd v1 on one controller only.
    500: (b"bash", 1002, b"12:pids:/\n11:freezer:/slurm/uid_1002/job_5000/step_batch/task_0\n10:devices:/slurm/uid_1002/job_5000/step_batch/task_0\n4:memory:/slurm/uid_1002/job_5000/step_batch/task_0\n0::/\n",
          env(SLURM_JOB_ID="5000", SLURM_JOB_NAME="v1job"), 3000),
    # Its uid is root (a setuid helper would be), but the v1 path names the owner.
    501: (b"helper", 0, b"11:freezer:/slurm/uid_1002/job_5000/step_0/task_0\n0::/\n", b"", 3001),
    # v1 slurmstepd as seen on a real node: freezer at job level, devices at step level.
    503: (b"slurmstepd", 0, b"6:freezer:/slurm/uid_1002/job_5000\n5:devices:/slurm/uid_1002/job_5000/step_batch\n0::/\n", b"", 2999),
    502: (b"worker", 1002, b"12:pids:/\n10:devices:/slurm_node-c/uid_1002/job_5001/step_0/task_3\n0::/\n", None, 3100),
    # Slurm 26.05 SLUID directory: the id comes from slurmstepd's title.
    600: (b"train", 1001, HYBRID + V2 + b"s0W5FQ2XKD8Y3M/step_0/user/task_0\n",
          env(SLURM_JOB_ID="6000", SLURM_JOB_NAME="sluid-job"), 4000),
    601: (b"slurmstepd", 0, HYBRID + V2 + b"s0W5FQ2XKD8Y3M/step_0/slurm\n", b"", 3999),
    # A SLUID job whose task claims job 4242: slurmstepd says 6100.
    610: (b"liar", 1002, HYBRID + V2 + b"s1A2B3C4D5E6F7/step_0/user/task_0\n",
          env(SLURM_JOB_ID="4242", SLURM_JOB_NAME="sluid-liar"), 4100),
    611: (b"slurmstepd", 0, HYBRID + V2 + b"s1A2B3C4D5E6F7/step_0/slurm\n", b"", 4099),
    # Two SLUID jobs whose slurmstepds both name job 6200: one keeps its SLUID.
    620: (b"slurmstepd", 0, HYBRID + V2 + b"s2AAAAAAAAAAAA/step_batch/slurm\n", b"", 4199),
    621: (b"twin", 1001, HYBRID + V2 + b"s2AAAAAAAAAAAA/step_batch/user/task_0\n",
          env(SLURM_JOB_ID="6200", SLURM_JOB_NAME="twin"), 4200),
    622: (b"slurmstepd", 0, HYBRID + V2 + b"s2BBBBBBBBBBBB/step_batch/slurm\n", b"", 4201),
    623: (b"twin", 1002, HYBRID + V2 + b"s2BBBBBBBBBBBB/step_batch/user/task_0\n",
          env(SLURM_JOB_ID="6200", SLURM_JOB_NAME="twin"), 4202),
    # The slurm leaf holding a process that is not root's: not believed.
    630: (b"slurmstepd", 1001, HYBRID + V2 + b"s3CCCCCCCCCCCC/step_0/slurm\n", b"", 4299),
    631: (b"task", 1001, HYBRID + V2 + b"s3CCCCCCCCCCCC/step_0/user/task_0\n",
          env(SLURM_JOB_ID="6300", SLURM_JOB_NAME="unknown"), 4300),
    # Hostile names and malformed paths.
    700: (b"evil", 1001, HYBRID + V2 + b"job_7000/step_batch/user/task_0\n",
          env(SLURM_JOB_ID="7000", SLURM_JOB_NAME=b'evil\nname\xff"} or {a="b'), 5000),
    701: (b"bad", 1001, HYBRID + V2 + b"job_/step_0/user/task_0\n", b"", 5001),
    702: (b"bad", 1001, HYBRID + V2 + b"job_12ab/step_0/user/task_0\n", b"", 5002),
    703: (b"garbage", 1001, b"\x00\xff\xfe garbage\n::\n", b"", 5003),
    705: (b"a) (b\nc", 1001, HYBRID + V2 + b"job_7001/step_batch/user/task_0\n",
          env(SLURM_JOB_ID="7001", SLURM_JOB_NAME="ok"), 5005),
    # Array task 8001 of array 8000.
    800: (b"array", 1002, HYBRID + V2 + b"job_8001/step_batch/user/task_0\n",
          env(SLURM_JOB_ID="8001", SLURM_ARRAY_JOB_ID="8000", SLURM_ARRAY_TASK_ID="1", SLURM_JOB_NAME="arr"), 6000),
    # alice's look-alike of bob's job 4242, built in her systemd user
    # manager's delegated subtree: in no job, however many processes.
    950: (b"mallory", 1002, HYBRID + b"0::/user.slice/user-1002.slice/user@1002.service/app.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
          env(SLURM_JOB_ID="4242", SLURM_JOB_NAME="hijack"), 8000),
    951: (b"mallory", 1002, HYBRID + b"0::/user.slice/user-1002.slice/user@1002.service/app.slice/slurmstepd.scope/job_4242/step_0/user/task_1\n",
          env(SLURM_JOB_ID="4242", SLURM_JOB_NAME="hijack"), 8001),
    952: (b"mallory", 1002, HYBRID + b"0::/user.slice/user-1002.slice/user@1002.service/app.slice/slurmstepd.scope/job_4242/step_0/user/task_2\n",
          env(SLURM_JOB_ID="4242", SLURM_JOB_NAME="hijack"), 8002),
    953: (b"mallory", 1002, HYBRID + b"0::/user.slice/user-1002.slice/user@1002.service/app.slice/slurmstepd.scope/job_4242/step_0/user/task_3\n",
          env(SLURM_JOB_ID="4242", SLURM_JOB_NAME="hijack"), 8003),
    954: (b"mallory", 1002, HYBRID + b"0::/user.slice/user-1002.slice/user@1002.service/app.slice/slurmstepd.scope/job_4242/step_0/user/task_4\n",
          env(SLURM_JOB_ID="4242", SLURM_JOB_NAME="hijack"), 8004),
    # A task that rewrote SLURM_JOB_ID to another job: its metadata is ignored.
    900: (b"liar", 1001, HYBRID + V2 + b"job_9000/step_0/user/task_0\n",
          env(SLURM_JOB_ID="4242", SLURM_JOB_NAME="liar"), 7000),
}

# What slurmstepd writes over its command line; other processes have none.
cmdlines = {
    300: b"slurmstepd: [4242.batch]\0", 310: b"slurmstepd: [4242.0]\0\0\0", 401: b"slurmstepd: [4300.0]\0",
    503: b"slurmstepd: [5000.batch]\0", 601: b"slurmstepd: [6000.0]\0\0\0", 611: b"slurmstepd: [6100.0]\0",
    620: b"slurmstepd: [6200.batch]\0", 622: b"slurmstepd: [6200.batch]\0", 630: b"slurmstepd: [6300.0]\0",
}

def status(comm, uid):
    return ("Name:\t%s\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t1\nPid:\t1\nPPid:\t0\n"
            "Uid:\t%d\t%d\t%d\t%d\nGid:\t%d\t%d\t%d\t%d\n" % (comm.decode(errors="replace").replace("\n", "\\n"), uid, uid, uid, uid, uid, uid, uid, uid)).encode()

def stat(pid, comm, start):
    # Fields 3..22: state ppid pgrp session tty tpgid flags minflt cminflt
    # majflt cmajflt utime stime cutime cstime priority nice threads
    # itrealvalue starttime, then a few more.
    return b"%d (%s) S 1 %d %d 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 %d 1000000 100 18446744073709551615\n" % (pid, comm, pid, pid, start)

shutil.rmtree(ROOT, ignore_errors=True)
for pid, (comm, uid, cg, envb, start) in procs.items():
    d = os.path.join(ROOT, str(pid))
    os.makedirs(d)
    open(os.path.join(d, "stat"), "wb").write(stat(pid, comm, start))
    open(os.path.join(d, "status"), "wb").write(status(comm, uid))
    open(os.path.join(d, "cgroup"), "wb").write(cg)
    if envb is not None:
        open(os.path.join(d, "environ"), "wb").write(envb)
    open(os.path.join(d, "cmdline"), "wb").write(cmdlines.get(pid, comm + b"\0"))
# A process that exited between listing and reading: only a cgroup file.
os.makedirs(os.path.join(ROOT, "704"))
open(os.path.join(ROOT, "704", "cgroup"), "wb").write(HYBRID + V2 + b"job_4242/step_0/user/task_2\n")
# Non-process entries a real /proc has.
os.makedirs(os.path.join(ROOT, "self"), exist_ok=True)
open(os.path.join(ROOT, "uptime"), "w").write("1.0 1.0\n")

with open(os.path.join(os.path.dirname(ROOT), "passwd"), "w") as f:
    f.write("root:x:0:0:root:/root:/bin/bash\nbob:x:1001:1001::/home/bob:/bin/bash\nalice:x:1002:1002::/home/alice:/bin/bash\n")
