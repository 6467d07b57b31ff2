"""Content-addressed build cache: one folder per (sources, flags, toolchain) hash.

Compilation dominates every agent round and RL step, so a kernel is never built twice. A build
is written to a temporary folder and renamed into place, so concurrent children that build the
same source never see half a library.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CACHE_DIR = Path("~/.cache/agentforge").expanduser()

_cache_root: Path = DEFAULT_CACHE_DIR


def set_cache_root(path: str | os.PathLike[str] | None) -> None:
    """Set by the sandbox child's entry point from the job; library code never reads env."""
    global _cache_root
    _cache_root = Path(path).expanduser() if path else DEFAULT_CACHE_DIR


def cache_root() -> Path:
    return _cache_root


CACHE_FORMAT = "2"  # bump when the layout of a cache folder changes


def build_key(kind: str, sources: Iterable[str], flags: Iterable[str], toolchain: str) -> str:
    digest = hashlib.sha256(CACHE_FORMAT.encode())
    for part in (kind, toolchain, *sources, "\0flags\0", *flags):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:24]


@dataclass(frozen=True)
class CacheEntry:
    folder: Path

    @property
    def ready(self) -> bool:
        return (self.folder / "READY").exists()


TRUSTED_TREE = "trusted"  # built only by the parent, which never runs candidate code; read-only to the sandbox

_writing_trusted = False


@contextlib.contextmanager
def writing_trusted_tree(cache_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Build into the trusted tree of `cache_dir` for the time being (the parent's header
    prebuilder only); the caller's cache root and tree afterwards (a header built in a caller's
    process, a test's, sent every later build of that process to the trusted tree)."""
    global _cache_root, _writing_trusted
    saved = _cache_root, _writing_trusted
    set_cache_root(cache_dir)
    _writing_trusted = True
    try:
        yield
    finally:
        _cache_root, _writing_trusted = saved


JUDGE_STORE = "judge-built"  # the judge's builds (`judge.judge_builds`): written only by the judge's uid


def store_root(cache_dir: str | os.PathLike[str]) -> Path:
    return Path(cache_dir) / JUDGE_STORE


def prepare_store(cache_dir: str | os.PathLike[str], judge_uid: int | None) -> None:
    """Make the judge's store (the sandbox's parent, before each job): owned by `judge_uid` where the
    parent is root, not writable by anyone else. One a candidate replaced (its owner is another uid)
    is removed first: a candidate may spoil its own job's builds, never a later job's."""
    root = store_root(cache_dir)
    owner = judge_uid if judge_uid is not None else os.geteuid()
    with contextlib.suppress(OSError):  # one that cannot be made: the judge builds nothing (it says why)
        if root.is_symlink() or (root.exists() and (root.lstat().st_uid != owner or not root.is_dir())):
            if root.is_dir() and not root.is_symlink():
                shutil.rmtree(root)
            else:
                root.unlink()
        root.mkdir(parents=True, exist_ok=True)
        if judge_uid is not None and os.geteuid() == 0:
            os.chown(root, judge_uid, judge_uid)
        root.chmod(0o755)


def judges(path: Path) -> bool:
    """Whether `path` is this process's own and nobody else may write it (no link)."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return (info.st_uid == os.geteuid() and not stat.S_ISLNK(info.st_mode)
            and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH))


def _builds() -> Path:
    """One build tree per user: a library built by root (an in-process run) is unreadable to the
    sandbox's unprivileged uid, and an unprivileged child must never write where root loads from."""
    if _writing_trusted:
        return cache_root() / TRUSTED_TREE
    return cache_root() / f"build-uid{os.geteuid()}"


def entry(kind: str, key: str) -> CacheEntry:
    return CacheEntry(_builds() / kind / key)


def trusted_entry(kind: str, key: str) -> CacheEntry:
    """The same key in the trusted tree: what the parent prebuilt (a precompiled header), which a
    sandboxed candidate can read and cannot have written."""
    return CacheEntry(cache_root() / TRUSTED_TREE / kind / key)


def publish(staging: Path, target: CacheEntry) -> None:
    """Move a finished build into the cache atomically; a concurrent winner is kept."""
    (staging / "READY").write_text("ok\n")
    target.folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(staging, target.folder)
    except OSError:
        # Another process published the same key first; its build is identical.
        shutil.rmtree(staging, ignore_errors=True)


def ready_entries(kind: str) -> list[CacheEntry]:
    root = _builds() / kind
    if not root.is_dir():
        return []
    return [CacheEntry(p) for p in sorted(root.iterdir()) if not p.name.startswith(".") and CacheEntry(p).ready]


def staging_dir(kind: str) -> Path:
    root = _builds() / kind
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=".staging-", dir=root))


@contextlib.contextmanager
def locked(kind: str, key: str) -> Iterator[None]:
    """Hold an exclusive lock on one key while building it: for builds too costly to do twice at
    once (a precompiled header is a minute of both cores and 2 GB of memory), the second process
    waits and then finds the first one's result."""
    root = _builds() / kind
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{key}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
