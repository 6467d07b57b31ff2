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


def resolve_mode(requested: str) -> str:
    """The isolation mode to use; an explicit mode that cannot run is SandboxUnavailable."""
    if requested != "auto":
        reason = probe(requested)
        if reason:
            raise SandboxUnavailable(f"sandbox isolation {requested!r} is unavailable: {reason}; "
                                     "set sandbox.isolation to auto or none")
        return requested
    return next(mode for mode in ("bwrap", "unshare", "none") if probe(mode) is None)


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


def plan(requested: str, workdir: str, cache_dir: str, read_paths: list[str], uid: int,
         fallback_cache: str, python: str) -> IsolationPlan:
    mode = resolve_mode(requested)
    drop = uid if is_root() else None
    read = [p for p in _outermost(read_paths) if p not in ("/",)]
    if mode == "bwrap":
        return _bwrap(workdir, cache_dir, read, drop)
    if mode == "unshare":
        return _unshare(workdir, cache_dir, read, drop)
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


def _bwrap(workdir: str, cache_dir: str, read: list[str], drop: int | None) -> IsolationPlan:
    masks, binds = _masks_and_binds(read, [workdir, cache_dir], drop)
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev"]
    for node in gpu_device_nodes():
        argv += ["--dev-bind", node, node]
    argv += ["--proc", "/proc", "--perms", "01777", "--tmpfs", "/tmp", "--perms", "01777", "--tmpfs", "/dev/shm"]
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


def _unshare(workdir: str, cache_dir: str, read: list[str], drop: int | None) -> IsolationPlan:
    masks, binds = _masks_and_binds(read, [workdir, cache_dir], drop)
    argv = ["unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child",
            "--mount-proc"]
    if drop is None:
        argv.append("--map-root-user")
    argv.append("--")
    ops = [MountOp("tmpfs", "/tmp"), MountOp("tmpfs", "/dev/shm")]
    ops += [MountOp("mask", m) for m in masks]
    ops += [MountOp("ro-bind", p, p) for p in binds]
    ops += [MountOp("bind", p, p) for p in (workdir, cache_dir)]
    ops.append(MountOp("readonly-all"))
    desc = f"process+unshare(ro-root,no-net,pid-ns,{_uid_text(drop)},rlimits)"
    return IsolationPlan("unshare", tuple(argv), tuple(ops), drop, cache_dir, desc)
