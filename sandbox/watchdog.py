"""The parent's view of a child's process tree: who is in it, what it holds, ending it.

Descendants are found through /proc (parent links), remembered with their start time so that a
reused pid is never killed by mistake, and killed at the end even if they left the process group
(`setsid`) or were re-parented to init.

`check()` is the watchdog's question, asked a few times a second while the job runs; the first
limit the tree is over is the verdict:

- memory (`SandboxConfig.memory_gb`; the only memory limit on CUDA jobs, where RLIMIT_AS cannot
  be used): the resident-set sum is cheap but counts a page shared by N processes N times, so a
  fork burst of a process that imported torch "used" 21 GiB; above the limit the proportional set
  (PSS: each shared page divided among its sharers) decides;
- processes (`max_processes`): as many processes at once as the limit allows is a fork burst,
  named as such (RLIMIT_NPROC stops it below root; as root it is the only process limit);
- disk (`disk_gb`): the bytes allocated in the job's folders (its work folder) plus the private
  /tmp and /dev/shm tmpfs of the job's mount namespace, where it has one (bwrap, unshare).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")
DISK_PERIOD_S = 0.5  # walking the work folder costs more than reading /proc: at most this often
PRIVATE_TMPFS = ("tmp", "dev/shm")  # fresh in a sandbox's mount namespace, counted towards disk


@dataclass(frozen=True)
class Breach:
    """A limit the tree went over, as the watchdog measured it."""

    kind: str  # memory | processes | disk
    used: int  # bytes, or processes
    limit: int
    detail: str = ""  # where the bytes were (disk)


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


def _pss_bytes(pid: int) -> int:
    """Proportional set size: shared pages divided among the processes that map them."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        pass
    return _rss_bytes(pid)  # kernels without smaps_rollup, or a process gone meanwhile


def allocated_bytes(paths: Iterable[str]) -> int:
    """Bytes allocated on disk under `paths` (blocks, so sparse files count what they hold; hard
    links once; symlinks not followed)."""
    total, seen, todo = 0, set(), [p for p in paths if os.path.isdir(p)]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            total += info.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                todo.append(entry.path)
    return total


def _mount_ns(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def private_tmpfs_bytes(pids: Iterable[int]) -> int:
    """Bytes used in the /tmp and /dev/shm of each mount namespace (other than ours) the tree's
    processes live in, where those are private mounts (a tmpfs, another filesystem than ours at
    the same place: the fresh tmpfs of bwrap and unshare, which only this job writes)."""
    ours, done, total = _mount_ns("self"), set(), 0
    for pid in pids:
        ns = _mount_ns(pid)
        if ns is None or ns == ours or ns in done:
            continue
        types = mount_types(_read(f"/proc/{pid}/mountinfo"))
        if types is None:
            continue
        used = [_private_used(f"/proc/{pid}/root/{where}", f"/{where}", types.get(f"/{where}"))
                for where in PRIVATE_TMPFS]
        if None in used:
            continue  # not readable through this process (gone, or not dumpable): try another
        done.add(ns)
        total += sum(u for u in used if u is not None)
    return total


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def mount_types(mountinfo: str | None) -> dict[str, str] | None:
    """Mount point -> filesystem type, from a /proc/PID/mountinfo text (the last mount at a point
    is the one seen there); None when there is no text."""
    if mountinfo is None:
        return None
    types: dict[str, str] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        types[fields[4]] = line.split(" - ", 1)[1].split()[0]
    return types


def _private_used(path: str, ours: str, fs_type: str | None) -> int | None:
    """Bytes used on the filesystem at `path` if it is a tmpfs other than the one we have at
    `ours` (0 otherwise: the host's own /tmp seen before the sandbox mounted its tmpfs, or any
    filesystem that is not a tmpfs, whose usage is a whole disk's and not the job's); None when
    unreadable."""
    try:
        if fs_type != "tmpfs" or os.stat(path).st_dev == os.stat(ours).st_dev:
            return 0
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


@dataclass
class ProcessTree:
    root: int
    seen: dict[int, int] = field(default_factory=dict)  # pid -> start time, ever seen in the tree
    memory_limit: int | None = None  # bytes; None: not watched
    process_limit: int | None = None
    disk_limit: int | None = None  # bytes, over `watch_dirs` and the private tmpfs
    watch_dirs: tuple[str, ...] = ()
    _next_disk: float = 0.0

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

    def check(self) -> Breach | None:
        """The first limit the tree is over now, or None."""
        members = self.scan()
        if self.process_limit is not None and len(members) >= self.process_limit:
            return Breach("processes", len(members), self.process_limit)
        if self.memory_limit is not None and sum(_rss_bytes(pid) for pid in members) > self.memory_limit:
            pss = sum(_pss_bytes(pid) for pid in members)  # ~2 ms a process: only when it matters
            if pss > self.memory_limit:
                return Breach("memory", pss, self.memory_limit)
        if self.disk_limit is not None and time.monotonic() >= self._next_disk:
            self._next_disk = time.monotonic() + DISK_PERIOD_S
            files, tmpfs = allocated_bytes(self.watch_dirs), private_tmpfs_bytes(members)
            if files + tmpfs > self.disk_limit:
                # Read again at once, over the tree as it is now: one reading through a process that was
                # changing under it (a compiler exiting) once gave 47 GiB for an honest job in a
                # fresh-clone CI run; files that fill the disk are there at the second reading too.
                files, tmpfs = allocated_bytes(self.watch_dirs), private_tmpfs_bytes(self.scan())
            if files + tmpfs > self.disk_limit:
                return Breach("disk", files + tmpfs, self.disk_limit,
                              f"work folder {files / 2**30:.2f} GiB, private /tmp and /dev/shm {tmpfs / 2**30:.2f} GiB")
        return None

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
