"""What the benchmarks share: running a child process for its wall time, peak memory and output;
the CPU time of this process and its children."""
import os
import resource
import subprocess
import sys
import tempfile
import time


def run_child(cmd):
    """Runs cmd in a child process; returns (wall seconds, peak resident set size in MiB from
    wait4's rusage, stdout, stderr). Exits on failure."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        sys.exit(f"bench: command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{stderr[-2000:]}")
    return elapsed, usage.ru_maxrss / 1024.0, stdout, stderr


def run_timed(cmd):
    """Runs cmd in a child process; returns its wall time in seconds (exits on failure)."""
    return run_child(cmd)[0]


def peak_rss_mib(cmd):
    """Peak resident set size of one run of cmd in MiB (KiB from wait4's rusage on Linux)."""
    return run_child(cmd)[1]


def cpu_seconds():
    """CPU time of this process (all its threads) and of its finished children: on a loaded
    machine it varies less than the wall time."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime
