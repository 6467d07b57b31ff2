"""Which filesystem/network/pid isolation wraps the child, and the command prefix that sets it up.

- bwrap (bubblewrap): `--ro-bind / /`, fresh /dev (GPU nodes bound back), /proc and /tmp, the work
  and cache directories bound read-write, new network, pid, ipc and uts namespaces, dies with the
  parent. Started as root, bwrap runs privileged and the child drops to the sandbox uid itself;
  otherwise bwrap runs in a user namespace as the caller.
- unshare (util-linux): the same namespaces; the child builds the read-only mount tree itself
  (`mounts.py`) before dropping privileges. Needs root or unprivileged user namespaces.
- none: resource limits, the process group and the uid drop only, plus a subreaper (`reaper.py`)
  that kills whatever the child leaves behind.

`auto` takes the first of bwrap, unshare that works on this machine (probed once per process).
It never falls back to `none` silently: as root, where the candidate would run unconfined as
root or as a uid that can still read the whole machine and reach loopback, `auto` without bwrap
or unshare refuses (SandboxUnavailable) and only an explicit `none` runs; as another user it runs
under `none` and every verdict says so in `EvalProvenance.isolation`.
When the sandbox uid cannot reach a path the child needs (the interpreter under a 0700 /root, say),
the isolating modes mask the unreachable ancestor with a tmpfs and bind the path back.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agentforge.sandbox.request import MountOp

NAMESPACES = ("--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts")


class SandboxUnavailable(RuntimeError):
    """The isolation asked for cannot run on this machine; the message says why and what to do."""


@dataclass(frozen=True)
class IsolationPlan:
    mode: str  # bwrap | unshare | none
    prefix: tuple[str, ...]  # argv in front of the child's interpreter
    mounts: tuple[MountOp, ...]  # built by the child itself (unshare only)
    drop_to_uid: int | None  # the child starts as root and drops to this uid
    cache_dir: str  # the build cache as the child sees it
    description: str  # for EvalProvenance.sandbox


def is_root() -> bool:
    return os.geteuid() == 0


@functools.cache
def probe(mode: str) -> str | None:
    """None when `mode` works here, else why not (cached per process)."""
    if mode == "none":
        return None
    tool = "bwrap" if mode == "bwrap" else "unshare"
    if shutil.which(tool) is None:
        return f"{tool} is not installed (apt-get install -y {'bubblewrap' if tool == 'bwrap' else 'util-linux'})"
    if mode == "bwrap":
        argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", *NAMESPACES]
        argv += [] if is_root() else ["--unshare-user"]
    else:
        argv = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
        argv += [] if is_root() else ["--map-root-user"]
    try:
        proc = subprocess.run([*argv, "true"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{tool} could not start: {exc}"
    if proc.returncode != 0:
        return f"{tool} failed here (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
    return None


ISOLATING_MODES = ("bwrap", "unshare")


def resolve_mode(requested: str) -> str:
    """The isolation mode to use; one that cannot run is SandboxUnavailable (see the module doc)."""
    if requested != "auto":
        reason = probe(requested)
        if reason:
            raise SandboxUnavailable(f"sandbox isolation {requested!r} is unavailable: {reason}; "
                                     "set sandbox.isolation to auto or none")
        return requested
    for mode in ISOLATING_MODES:
        if probe(mode) is None:
            return mode
    if is_root():
        reasons = "; ".join(f"{mode}: {probe(mode)}" for mode in ISOLATING_MODES)
        raise SandboxUnavailable(
            f"no sandbox isolation works here ({reasons}), and as root an unisolated candidate could read "
            "and write anything on this machine: install bubblewrap (apt-get install -y bubblewrap), or "
            "give --isolation none (AGENTFORGE_SANDBOX_ISOLATION=none) to run candidates unisolated on purpose")
    return "none"


def auto_without_isolation(requested: str) -> bool:
    """Whether `requested` ends up as `none` without having been asked for (a non-root `auto` on a
    machine without bwrap or unshare): callers warn the user once."""
    return requested == "auto" and resolve_mode(requested) == "none"


def child_paths(python: str, extra: Iterable[str]) -> list[str]:
    """Directories the child reads: its interpreter, its prefixes, this package, extra roots."""
    package_root = Path(__file__).resolve().parent.parent
    import agentforge

    paths = {str(Path(os.path.realpath(python)).parent.parent), sys.prefix, sys.base_prefix,
             str(package_root), str(Path(agentforge.__file__).resolve().parent.parent), *extra}
    return sorted(str(Path(p).resolve()) for p in paths)


def _traversable(path: Path, uid: int) -> bool:
    info = path.stat()
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IXUSR)
    if info.st_gid == uid:
        return bool(info.st_mode & stat.S_IXGRP)
    return bool(info.st_mode & stat.S_IXOTH)


def blocking_ancestor(path: str, uid: int) -> str | None:
    """The highest directory above `path` that `uid` cannot traverse, or None."""
    for ancestor in reversed(Path(path).parents):
        if ancestor != Path("/") and not _traversable(ancestor, uid):
            return str(ancestor)
    return None


def _outermost(paths: Iterable[str]) -> list[str]:
    ordered = sorted(set(paths))
    return [p for p in ordered if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in ordered)]


def _masks(read: list[str], write: list[str], uid: int | None) -> tuple[list[str], list[str]]:
    """(tmpfs masks, read-only binds) so that `uid` reaches every path in read + write."""
    if uid is None:
        return [], []
    masks, binds = [], []
    for path in [*read, *write]:
        blocker = blocking_ancestor(path, uid)
        if blocker:
            masks.append(blocker)
            if path in read:
                binds.append(path)
    return _outermost(masks), _outermost(binds)


def _dirs_inside(tops: list[str], targets: list[str]) -> list[str]:
    """Directories strictly between a fresh tmpfs in `tops` and each target, top-down."""
    found: list[str] = []
    for target in targets:
        top = max((t for t in tops if target.startswith(t.rstrip("/") + "/")), key=len, default=None)
        if top is None:
            continue
        for ancestor in reversed(Path(target).parents):
            if len(str(ancestor)) > len(top) and str(ancestor) not in found:
                found.append(str(ancestor))
    return found


def gpu_device_nodes() -> list[str]:
    return sorted(glob.glob("/dev/nvidia*")) + sorted(glob.glob("/dev/dri"))


@functools.cache
def bwrap_sizes_tmpfs() -> bool:
    """Whether this bwrap takes `--size` for a tmpfs (0.6 and later)."""
    argv = ["bwrap", "--ro-bind", "/", "/", "--size", "1048576", "--tmpfs", "/tmp", "--unshare-user", "true"]
    if is_root():
        argv.remove("--unshare-user")
    try:
        return subprocess.run(argv, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def plan(requested: str, workdir: str, cache_dir: str, read_paths: list[str], uid: int,
         fallback_cache: str, python: str, tmpfs_bytes: int | None = None) -> IsolationPlan:
    """`tmpfs_bytes` caps each private tmpfs (/tmp, /dev/shm) where the tool can (bwrap); the
    watchdog caps their total with the work folder's (`SandboxConfig.disk_gb`) in every mode."""
    mode = resolve_mode(requested)
    drop = uid if is_root() else None
    read = [p for p in _outermost(read_paths) if p not in ("/",)]
    if mode == "bwrap":
        return _bwrap(workdir, cache_dir, read, drop, tmpfs_bytes)
    if mode == "unshare":
        return _unshare(workdir, cache_dir, read, drop, python)
    # No mount namespace: a uid that cannot reach the interpreter cannot run it; stay as we are,
    # and give the child a cache it can write when the configured one is out of its reach.
    if drop is not None and any(blocking_ancestor(p, drop) for p in [*read, workdir]):
        drop = None
    if drop is not None and blocking_ancestor(cache_dir, drop):
        cache_dir = fallback_cache
    uid_text = f"uid={drop if drop is not None else os.geteuid()}"
    reaper = (python, "-I", "-S", str(Path(__file__).with_name("reaper.py")))  # stdlib only: fast start
    return IsolationPlan("none", reaper, (), drop, cache_dir, f"process+none({uid_text},rlimits,reaper)")


def _uid_text(drop: int | None) -> str:
    return f"uid={drop}" if drop is not None else f"uid={os.geteuid()}(userns)"


FRESH_TMPFS = ("/tmp", "/dev/shm")  # private in the sandbox: what the child reads there is bound back


def _under(path: str, tops: Iterable[str]) -> bool:
    return any(path.startswith(top.rstrip("/") + "/") for top in tops)


def _masks_and_binds(read: list[str], write: list[str], drop: int | None) -> tuple[list[str], list[str]]:
    masks, binds = _masks(read, write, drop)
    return masks, _outermost([*binds, *(p for p in read if _under(p, FRESH_TMPFS))])


def _bwrap(workdir: str, cache_dir: str, read: list[str], drop: int | None,
           tmpfs_bytes: int | None = None) -> IsolationPlan:
    masks, binds = _masks_and_binds(read, [workdir, cache_dir], drop)
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev"]
    for node in gpu_device_nodes():
        argv += ["--dev-bind", node, node]
    size = ["--size", str(tmpfs_bytes)] if tmpfs_bytes and bwrap_sizes_tmpfs() else []
    argv += ["--proc", "/proc", "--perms", "01777", *size, "--tmpfs", "/tmp", "--perms", "01777", *size,
             "--tmpfs", "/dev/shm"]
    for mask in masks:
        argv += ["--tmpfs", mask]
    # bwrap creates missing mount points 0700; the sandbox uid must traverse them.
    for directory in _dirs_inside([*FRESH_TMPFS, *masks], [*binds, workdir, cache_dir]):
        argv += ["--perms", "0755", "--dir", directory]
    for path in binds:
        argv += ["--ro-bind", path, path]
    for path in (workdir, cache_dir):
        argv += ["--bind", path, path]
    argv += [*NAMESPACES, "--die-with-parent", "--chdir", workdir]
    if drop is None:
        argv.append("--unshare-user")
    argv.append("--")
    desc = f"process+bwrap(ro-root,no-net,pid-ns,{_uid_text(drop)},rlimits)"
    return IsolationPlan("bwrap", tuple(argv), (), drop, cache_dir, desc)


def _unshare(workdir: str, cache_dir: str, read: list[str], drop: int | None, python: str) -> IsolationPlan:
    masks, binds = _masks_and_binds(read, [workdir, cache_dir], drop)
    # unshare itself does not die with its parent (bwrap has --die-with-parent): exec it with a
    # parent-death signal, so that killing agentforge (even with SIGKILL) ends the namespace's
    # init (--kill-child), and with it every process of the job.
    argv = [python, "-I", "-S", str(Path(__file__).with_name("reaper.py")), "--die-with-parent", str(os.getpid()),
            "unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
            "--mount-proc"]
    if drop is None:
        argv.append("--map-root-user")
    argv.append("--")
    ops = [MountOp("tmpfs", "/tmp"), MountOp("tmpfs", "/dev/shm")]
    ops += [MountOp("mask", m) for m in masks]
    ops += [MountOp("ro-bind", p, p) for p in binds]
    ops += [MountOp("bind", p, p) for p in (workdir, cache_dir)]
    ops += [MountOp("proc", "/proc"), MountOp("readonly-all")]
    desc = f"process+unshare(ro-root,no-net,pid-ns,{_uid_text(drop)},rlimits)"
    return IsolationPlan("unshare", tuple(argv), tuple(ops), drop, cache_dir, desc)


JUDGE_UID = 65533


def judge_uid(sandbox_uid: int) -> int:
    """The judge's own uid when the sandbox starts as root: unprivileged and never the worker's
    (`sandbox_uid`), so that the kernel keeps the worker's signals, priority, affinity, ptrace and
    /proc writes off the judge."""
    return JUDGE_UID if sandbox_uid != JUDGE_UID else JUDGE_UID - 1
