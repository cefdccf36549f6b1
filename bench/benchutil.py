"""What the benchmarks share: timing a child process and reading its peak memory."""
import os
import subprocess
import sys
import time


def run_timed(cmd):
    """Runs cmd in a child process; returns its wall time in seconds (exits on failure)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate()
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"bench: command failed ({proc.returncode}): {' '.join(map(str, cmd))}\n{err[-2000:]}")
    return elapsed


def peak_rss_mib(cmd):
    """Peak resident set size of one run of cmd, from wait4's rusage (KiB on Linux)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        sys.exit(f"bench: command failed: {' '.join(map(str, cmd))}")
    return usage.ru_maxrss / 1024.0
