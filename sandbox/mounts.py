"""The mount namespace the child builds for itself when isolation is `unshare`.

`unshare --mount` gives the child a private copy of the host's mounts; this module turns it into
what bwrap builds: every mount read-only, fresh tmpfs where asked, the work and cache directories
bound read-write. It runs as (namespace) root before `drop_privileges`. Bind sources are opened
first and bound through /proc/self/fd, so a tmpfs that masks a parent directory (e.g. /root,
unreadable to the sandbox uid) does not hide them.

/proc is left writable, as bwrap's `--proc` leaves it: a process writes its own files there
(a thread's name in /proc/self/task/<tid>/comm, its oom_score_adj), and the CUDA driver's cuInit
fails with CUDA_ERROR_OPERATING_SYSTEM under a read-only /proc (seen on an H200). Another uid's
files stay closed by the kernel's own checks; the kernel-wide ones (`PROC_KERNEL_WIDE`) are bound
read-only, the set bwrap covers plus /proc/fs.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Sequence

from agentforge.sandbox.request import MountOp

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MS_STRICTATIME = 1 << 24

# Per-mount flags a user namespace may not clear on remount; they must be carried over.
_LOCKED = {"nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
           "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    enc = [None if s is None else s.encode() for s in (src, dst, fstype, data)]
    if libc.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {src} -> {dst} ({fstype}, flags {flags:#x}): {os.strerror(err)}")


def _mount_points() -> list[tuple[str, int]]:
    """(mount point, locked flags) of every mount, from /proc/self/mountinfo."""
    points = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            flags = 0
            for option in fields[5].split(","):
                flags |= _LOCKED.get(option, 0)
            points.append((point, flags))
    return points


PROC_KERNEL_WIDE = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")


def _proc_own_files_writable() -> set[str]:
    """Bind each kernel-wide /proc path onto itself, so that `readonly-all` makes it a read-only
    mount of its own while /proc stays writable; returns the targets spared from it."""
    for path in PROC_KERNEL_WIDE:
        if os.path.lexists(path):
            _mount(path, path, None, MS_BIND | MS_REC)
    return {"/proc"}


def _readonly_all(writable: set[str]) -> None:
    for point, flags in _mount_points():
        if point in writable:
            continue
        try:
            _mount(None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags)
        except OSError:
            if point == "/":
                raise  # the one that must hold; others (e.g. inside /proc) may refuse


def apply_mounts(ops: Sequence[MountOp]) -> None:
    """Carry out `ops` in order in this (private) mount namespace.

    `readonly-all` spares the targets of `bind` and `tmpfs` ops (and /proc after a `proc` op), so
    it goes last; `mask` tmpfs and `ro-bind` targets become read-only with the rest.
    """
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    writable = {op.dst for op in ops if op.kind in ("bind", "tmpfs")}
    sources = {op.src: os.open(op.src, os.O_PATH) for op in ops if op.src}
    try:
        for op in ops:
            if op.kind == "readonly-all":
                _readonly_all(writable)
            elif op.kind == "proc":
                writable |= _proc_own_files_writable()
            elif op.kind in ("tmpfs", "mask"):
                os.makedirs(op.dst, exist_ok=True)
                mode = "mode=1777" if op.kind == "tmpfs" else "mode=0755"  # a mask is only traversed
                _mount("tmpfs", op.dst, "tmpfs", MS_NOSUID | MS_NODEV, mode)
            elif op.kind in ("bind", "ro-bind"):
                os.makedirs(op.dst, exist_ok=True)
                _mount(f"/proc/self/fd/{sources[op.src]}", op.dst, None, MS_BIND | MS_REC)
                # ro-bind turns read-only with everything else at readonly-all
            else:
                raise ValueError(f"unknown mount op {op.kind!r}")
    finally:
        for fd in sources.values():
            os.close(fd)
