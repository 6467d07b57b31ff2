"""The parent's view of a child's process tree: who is in it, how much memory it holds, ending it.

Descendants are found through /proc (parent links), remembered with their start time so that a
reused pid is never killed by mistake, and killed at the end even if they left the process group
(`setsid`) or were re-parented to init. The resident-set total is what the memory watchdog
compares with `SandboxConfig.memory_gb` (the only memory limit on CUDA jobs, where RLIMIT_AS
cannot be used).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of `pid`, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[19])


def _rss_bytes(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


@dataclass
class ProcessTree:
    root: int
    seen: dict[int, int] = field(default_factory=dict)  # pid -> start time, ever seen in the tree

    def __post_init__(self) -> None:
        info = _stat(self.root)
        if info:
            self.seen[self.root] = info[1]

    def scan(self) -> list[int]:
        """The live members of the tree now (remembering them for `kill`)."""
        parents: dict[int, list[int]] = {}
        starts: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                info = _stat(int(entry.name))
                if info:
                    parents.setdefault(info[0], []).append(int(entry.name))
                    starts[int(entry.name)] = info[1]
        members, todo = [], [self.root] if self.root in starts else []
        while todo:
            pid = todo.pop()
            members.append(pid)
            self.seen.setdefault(pid, starts[pid])
            todo.extend(parents.get(pid, ()))
        return members

    def rss_bytes(self) -> int:
        return sum(_rss_bytes(pid) for pid in self.scan())

    def kill(self, pgid: int, grace_s: float, reap: Callable[[], object] = lambda: None) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s` if anyone is left, then SIGKILL
        every remembered descendant that is still the same process. `reap` collects the root's
        exit status (a zombie root would otherwise keep the group alive through the grace)."""
        self.scan()
        if _group_alive(pgid) and _signal_group(pgid, signal.SIGTERM):
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                reap()
                if not _group_alive(pgid):
                    break
                time.sleep(0.02)
        _signal_group(pgid, signal.SIGKILL)
        self.scan()
        for pid, start in self.seen.items():
            info = _stat(pid)
            if info and info[1] == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def _signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies, already dead and waiting to be
    reaped by whoever inherited them, do not count)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(f"/proc/{entry.name}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False
