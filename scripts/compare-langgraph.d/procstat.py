"""What a process spent, read from /proc the same way for every side: CPU
seconds (utime + stime, and for a server with children, theirs too) and the
resident set (VmRSS, and its peak VmHWM)."""

import os

TICK = os.sysconf("SC_CLK_TCK")


def _fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    # The command name is in parentheses and may hold spaces: split after it.
    return text[text.rindex(")") + 2 :].split()


def cpu(pid, children=False):
    """CPU seconds of `pid`; with `children`, also what its waited-for
    children spent (cutime + cstime)."""
    f = _fields(pid)
    ticks = int(f[11]) + int(f[12])
    if children:
        ticks += int(f[13]) + int(f[14])
    return ticks / TICK


def tree_cpu(pid):
    """CPU seconds of a server and its children, living and exited: a
    PostgreSQL postmaster's backends add theirs to its cutime/cstime when
    it reaps them, and the living ones are read one by one."""
    total = cpu(pid, children=True)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            f = _fields(entry)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
        if f[1] == str(pid):
            total += (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / TICK
    return total


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def rss(pid):
    return status_kb(pid, "VmRSS:")


def hwm(pid):
    return status_kb(pid, "VmHWM:")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])
