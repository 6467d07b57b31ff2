"""What the judge reads of the worker from outside, through /proc and the kernel's clocks: its
mapped libraries, its uid, its seccomp filters, the processes it left, its CPU time. The worker
cannot change what these say about it, only what it does."""

from __future__ import annotations

import os
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ThreadFilters:
    mode: int  # 0 none, 1 strict, 2 filter
    filters: int  # filters stacked on the thread (-1 where the kernel does not say)


def filters_of(pid: int) -> dict[int, ThreadFilters]:
    """What /proc says of each live thread of `pid` (read by the judge, outside the worker)."""
    found: dict[int, ThreadFilters] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        fields: dict[str, str] = {}
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    fields[key] = value.strip()
        except OSError:
            continue
        if "Seccomp" in fields:
            found[int(tid)] = ThreadFilters(int(fields["Seccomp"]), int(fields.get("Seccomp_filters", "-1")))
    return found


def mapped_libraries(pid: int) -> set[str] | None:
    """Paths of the shared objects mapped into process `pid` (read from /proc/PID/maps), or None."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    paths = (line.split(None, 5)[5] for line in lines if len(line.split(None, 5)) == 6)
    return {path for path in paths if path.startswith("/") and ".so" in path.rsplit("/", 1)[-1]}


def executable_files(pid: int) -> dict[str, str] | None:
    """The files mapped executable into process `pid` (from /proc/PID/maps, as the process sees them:
    any name, not only `*.so`; " (deleted)" after a file removed since), each with the address range
    of its first such mapping ("start-end", its name under /proc/PID/map_files), or None where the map
    may not be read."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    found: dict[str, str] = {}
    for row in (line.split(None, 5) for line in lines):
        if len(row) == 6 and "x" in row[1] and row[5].startswith("/"):
            found.setdefault(row[5], row[0])
    return found


def uid_of(pid: int) -> int | None:
    """The real uid of process `pid`, from /proc, or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def seccomp_mode(pid: int) -> int | None:
    """The seccomp mode every live thread of `pid` shares (2: filtered), or None where they differ."""
    modes = {t.mode for t in filters_of(pid).values()}
    return modes.pop() if len(modes) == 1 else None


def filters_text(threads: dict[int, Any]) -> str:
    return ", ".join(f"thread {tid}: mode {t.mode}, {t.filters} filters" for tid, t in sorted(threads.items())[:8])


def _process_table() -> dict[int, tuple[int, str, str, str]]:
    """pid -> (parent pid, state, name, start time in clock ticks) of every process this one can see."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                text = f.read()
        except OSError:
            continue
        name = text[text.find("(") + 1:text.rfind(")")]
        fields = text[text.rfind(")") + 2:].split()
        table[int(entry)] = (int(fields[1]), fields[0], name[:40], fields[19])
    return table


def _below(judge: int, table: dict[int, tuple[int, str, str, str]]) -> list[int]:
    below: list[int] = []
    frontier = [judge]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, row in table.items() if row[0] == parent and pid not in below]
        below += children
        frontier += children
    return below


def processes_below(judge: int) -> set[tuple[int, str]]:
    """(pid, start time) of the live processes below the judge now."""
    table = _process_table()
    return {(pid, table[pid][3]) for pid in _below(judge, table)}


def worker_helpers(judge: int, worker: int, older: Collection[tuple[int, str]] = (),
                   others: Collection[int] = ()) -> list[str]:
    """Live processes (not zombies) the worker started and left running, orphans included.

    Where the worker has a mount namespace of its own (`limits.private_tmp`), they are the other
    processes in it, anywhere on the machine: its guard lets nothing it starts leave that namespace
    (no unshare, setns or clone into a new one), and nothing the judge's own process starts (a
    caller's builds, another evaluation's worker) enters it. Otherwise they are the processes below
    the judge other than the worker and those in `older` (pid and start time: alive below the judge
    before the worker was; the judge is their subreaper, `child.main`). `others`: the judge's own
    workers beside it (the control worker), never the worker's."""
    table = _process_table()
    home = _mount_namespace(worker)
    newer = {pid for pid in _below(judge, table)
             if pid != worker and pid not in others and (pid, table[pid][3]) not in older}
    if home is not None and home != _mount_namespace(os.getpid()):
        # a process below the judge whose namespace cannot be read counts as the worker's, as before
        pids = sorted(pid for pid in table if pid != worker and pid not in others and (
            (space := _mount_namespace(pid)) == home or (space is None and pid in newer)))
    else:
        pids = sorted(newer)
    return [f"pid {pid} ({table[pid][2]}, state {table[pid][1]})" for pid in pids if table[pid][1] not in ("Z", "X")]


def _mount_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def process_cpu_clock(pid: int) -> int | None:
    """The id of another process's CPU-time clock (every thread it has or had, in nanoseconds), as
    Linux's clock_getcpuclockid makes it, or None where it cannot be read. The kernel keeps this
    clock: nothing the worker does inside itself changes what the judge reads."""
    clock = ((~pid) << 3) | 2  # CPUCLOCK_SCHED of the whole process `pid`
    try:
        time.clock_gettime_ns(clock)
    except (OSError, OverflowError, AttributeError):
        return None
    return clock


def thread_cpu_us(pid: int) -> dict[int, float]:
    """CPU time of each live thread of process `pid` (microseconds, from /proc/PID/task/TID/schedstat),
    read by the judge; empty where /proc cannot be read."""
    threads: dict[int, float] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return threads
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                threads[int(tid)] = int(f.read().split()[0]) / 1e3
        except (OSError, ValueError, IndexError):
            continue  # it ended between the listing and the read
    return threads


def cpu_ns(clock: int | None) -> int | None:
    """The reading of a CPU-time clock from `process_cpu_clock`, or None (no clock, or its process ended)."""
    if clock is None:
        return None
    try:
        return time.clock_gettime_ns(clock)
    except OSError:
        return None
