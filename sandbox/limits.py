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


def drop_privileges(uid: int, keep: tuple[int, ...] = ()) -> None:
    """From root to `uid`/`uid` (group = uid) with no supplementary groups; irreversible. `keep`:
    capabilities (numbers, e.g. `JUDGE_CAPABILITIES`) left effective afterwards, all others gone.

    The kernel clears the parent-death signal on a change of credentials: it is armed again, or
    a child whose parent was killed (agentforge by SIGKILL, and with it `unshare`) would live on,
    reparented to init, with everything it started."""
    if os.getuid() != 0 and os.geteuid() != 0:
        return
    armed = _parent_death_signal()
    if keep:
        _prctl(_PR_SET_KEEPCAPS, 1)
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise OSError(f"could not drop privileges to uid {uid}")
    if keep:
        _prctl(_PR_SET_KEEPCAPS, 0)
        _set_capabilities(keep)
    if armed:
        _prctl(_PR_SET_PDEATHSIG, armed)


_PR_SET_KEEPCAPS = 8
_CAPABILITY_V3 = 0x20080522
CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_KILL, CAP_SYS_PTRACE = 1, 3, 5, 19
# The judge, under its own uid, keeps what it needs of root over the worker, and nothing else:
# the work and cache folders belong to the sandbox (worker) uid, the judge kills the worker it
# forked, and reads the worker's memory map and opens its sampler (a process of another uid).
JUDGE_CAPABILITIES = (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_KILL, CAP_SYS_PTRACE)


def _set_capabilities(keep: tuple[int, ...]) -> None:
    """Permitted = effective = `keep`, inheritable none (so nothing the judge executes gets them)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    mask = 0
    for cap in keep:
        mask |= 1 << cap
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_V3, 0)
    data = (ctypes.c_uint32 * 6)(mask & 0xFFFFFFFF, mask & 0xFFFFFFFF, 0, mask >> 32, mask >> 32, 0)
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), f"capset failed: {os.strerror(ctypes.get_errno())}")


def capabilities() -> int:
    """This process's effective capability set, as a bit mask (from /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0


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


_CLONE_NEWNS = 0x00020000


def private_tmp(tmpfs_bytes: int | None, keep: tuple[str, ...] = (), code: tuple[str, ...] = ()) -> str:
    """This process (the candidate worker, still privileged) in a mount namespace of its own, with
    a fresh tmpfs on /tmp and /dev/shm: what it leaves there, the judge never sees, and the judge's
    /tmp (its private folder, the compile caches) is out of its sight. The mounts the sandbox put
    below them (the work and cache folders, when they live under /tmp) are bound back, flags and
    all, and so is each folder in `keep` found below them. Each folder in `code` found below them
    (the worker's own import roots: a checkout or a virtualenv under /tmp) is bound back read-only,
    with the writable ones inside it bound again on top. "yes", or why not."""
    from agentforge.sandbox import mounts

    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        return f"no: unshare(CLONE_NEWNS): {os.strerror(ctypes.get_errno())}"
    size = f",size={tmpfs_bytes}" if tmpfs_bytes else ""
    tops = ("/tmp", "/dev/shm")
    below = sorted({p for p in [*(p for p, _ in mounts._mount_points()), *map(os.path.realpath, keep)]
                    if any(p.startswith(top + "/") for top in tops) and os.path.isdir(p)})
    outermost = [p for p in below if not any(p != q and p.startswith(q + "/") for q in below)]
    roots = sorted({os.path.realpath(p) for p in code if os.path.isdir(p)})
    roots = [p for p in roots if any(p.startswith(top + "/") for top in tops)
             and not any(p != q and p.startswith(q + "/") for q in roots)]
    inside = [p for p in outermost if any(p == r or p.startswith(r + "/") for r in roots)]  # writable on top
    held = {path: os.open(path, os.O_PATH) for path in {*outermost, *roots}}

    def bind(path: str) -> None:
        os.makedirs(path, mode=0o755, exist_ok=True)
        mounts._mount(f"/proc/self/fd/{held[path]}", path, None, mounts.MS_BIND | mounts.MS_REC)

    try:
        mounts._mount(None, "/", None, mounts.MS_REC | mounts.MS_PRIVATE)
        for point in tops:
            mounts._mount("tmpfs", point, "tmpfs", mounts.MS_NOSUID | mounts.MS_NODEV, f"mode=1777{size}")
        for path in outermost:
            bind(path)
        for path in roots:
            bind(path)
            mounts._mount(None, path, None, mounts.MS_BIND | mounts.MS_REMOUNT | mounts.MS_RDONLY)
        for path in inside:
            bind(path)
    except OSError as exc:
        return f"no: {exc}"
    finally:
        for fd in held.values():
            os.close(fd)
    return "yes"


_PR_SET_CHILD_SUBREAPER = 36


def child_subreaper() -> None:
    """Orphaned descendants of this process are re-parented to it (not to init), so the judge's
    census of what the worker left running finds them."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
