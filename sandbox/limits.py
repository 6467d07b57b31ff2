"""Child-side hardening, applied by the child entry to itself before it reads the job's code.

Running these in the freshly exec'd child (rather than in a `preexec_fn`) keeps the parent free
of fork-unsafe callbacks while it runs many children from threads; the child is our own code up
to the moment it calls the entry, and every limit is set soft = hard so nothing it runs later can
raise them again.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
from pathlib import Path

from agentforge.sandbox.request import Limits

_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38


def _prctl(option: int, arg: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def die_with_parent() -> None:
    """SIGKILL this process when the parent that spawned it dies (Linux)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_DUMPABLE = 4


def not_dumpable() -> None:
    """No core dumps, and no ptrace or /proc/PID/{mem,fd,environ} access by other processes of the
    same uid: the judge's memory stays out of the candidate worker's reach."""
    _prctl(_PR_SET_DUMPABLE, 0)


def dumpable() -> None:
    """Dumpable again (a change of uid clears it), so that the judge, of the same uid, may read this
    process's memory map and sample it."""
    _prctl(_PR_SET_DUMPABLE, 1)


def no_new_privileges() -> None:
    """No setuid binary or file capability can give this process tree more rights."""
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)


def drop_privileges(uid: int) -> None:
    """From root to `uid`/`uid` (group = uid) with no supplementary groups; irreversible.

    The kernel clears the parent-death signal on a change of credentials: it is armed again, or
    a child whose parent was killed (agentforge by SIGKILL, and with it `unshare`) would live on,
    reparented to init, with everything it started."""
    if os.getuid() != 0 and os.geteuid() != 0:
        return
    armed = _parent_death_signal()
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError(f"could not drop privileges to uid {uid}")
    if armed:
        _prctl(_PR_SET_PDEATHSIG, armed)


_PR_GET_PDEATHSIG = 2


def _parent_death_signal() -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    value = ctypes.c_int(0)
    if libc.prctl(_PR_GET_PDEATHSIG, ctypes.byref(value), 0, 0, 0) != 0:
        return 0
    return value.value


def _processes_of(uid: int) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def apply_limits(limits: Limits) -> None:
    """Set the resource limits of this process (inherited by everything it starts)."""
    def hard(soft: int, limit: int, extra: int = 0) -> None:
        resource.setrlimit(limit, (soft, soft + extra))

    hard(0, resource.RLIMIT_CORE)
    hard(limits.cpu_seconds, resource.RLIMIT_CPU, 1)  # soft: SIGXCPU, then SIGKILL one second later
    hard(limits.file_size_bytes, resource.RLIMIT_FSIZE)
    if limits.address_space_bytes is not None:
        hard(limits.address_space_bytes, resource.RLIMIT_AS)
    if limits.max_processes is not None:
        # RLIMIT_NPROC counts every process of the real uid (in this user namespace), so the cap
        # is headroom above what that uid runs now; root is exempt, hence after drop_privileges.
        hard(_processes_of(os.getuid()) + limits.max_processes, resource.RLIMIT_NPROC)
