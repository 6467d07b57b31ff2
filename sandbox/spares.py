"""Spare evaluation children: started before their job, so a job does not wait for Python and torch.

A spare is an ordinary sandbox child (its own job folder, isolation plan, process group and pipes)
that has started, imported torch and forked its candidate worker, and is blocked reading its
request. Nothing of any job is in it yet: the job, its secrets and its limits come with the
request, and the child hardens itself after reading it, exactly as a child started at the job
does. Each spare serves one job and is never reused.

Spares are kept per process, by the config they were started for (`ProcessBackend._spare_key`),
and all are ended at exit: their request pipes close, and each is killed and its folder removed.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import os
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from agentforge.sandbox import reaper
from agentforge.sandbox.watchdog import ProcessTree


@dataclass
class Spare:
    proc: subprocess.Popen[bytes]
    req_w: int
    res_r: int
    job_dir: Path
    claim: reaper.JobClaim
    workdir: Path
    plan: Any  # isolation.IsolationPlan
    python: str
    out: BinaryIO
    err: BinaryIO

    def alive(self) -> bool:
        return self.proc.poll() is None

    def discard(self) -> None:
        """End the child (its whole process group) and remove what it had."""
        for fd in (self.req_w, self.res_r):
            with contextlib.suppress(OSError):
                os.close(fd)
        ProcessTree(self.proc.pid).kill(self.proc.pid, 0.0, reap=self.proc.poll)
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.proc.wait(timeout=5)
        for handle in (self.out, self.err):
            handle.close()
        reaper.remove_job_dir(self.job_dir)
        self.claim.release()


_lock = threading.Lock()
_spares: dict[str, list[Spare]] = {}
_pending: dict[str, int] = {}
# Spares are started from one thread that lives as long as the process: a child's parent-death
# signal (bwrap's --die-with-parent, the child's own PR_SET_PDEATHSIG) fires when the *thread*
# that started it ends, and a job's thread (a pool worker) ends long before the spare's job comes.
_keeper = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentforge-spares")


def start(key: str, limit: int, make: Callable[[], Spare | None]) -> None:
    """Start a spare for `key` in the background (`make` runs on the keeper thread), unless `limit`
    are waiting or being started already. Spares kept for any other config are ended first: a
    process that moved on to a new config (a new run, a test) would otherwise keep every old one,
    each an idle interpreter holding torch (about 0.4 GB)."""
    with _lock:
        stale = [spare for other, waiting in _spares.items() if other != key for spare in waiting]
        for other in [other for other in _spares if other != key]:
            del _spares[other]
        if len(_spares.get(key, [])) + _pending.get(key, 0) >= limit:
            stale_only = True
        else:
            stale_only = False
            _pending[key] = _pending.get(key, 0) + 1
    for spare in stale:
        spare.discard()
    if stale_only:
        return

    def run() -> None:
        try:
            spare = make()
        finally:
            with _lock:
                _pending[key] -= 1
        if spare is not None:
            put(key, spare)

    _keeper.submit(run)


def put(key: str, spare: Spare) -> None:
    with _lock:
        _spares.setdefault(key, []).append(spare)


def take(key: str) -> Spare | None:
    """A live spare started for `key`, oldest first (the most likely to have finished starting);
    dead ones met on the way are discarded."""
    while True:
        with _lock:
            waiting = _spares.get(key)
            spare = waiting.pop(0) if waiting else None
        if spare is None or spare.alive():
            return spare
        spare.discard()


def count(key: str) -> int:
    with _lock:
        return len(_spares.get(key, []))


def settle() -> None:
    """Wait until the spares being started are started (or have failed to)."""
    try:
        _keeper.submit(lambda: None).result()
    except RuntimeError:  # the keeper is shut down at exit: nothing is being started
        pass


def discard_all() -> None:
    """End every spare of this process (at exit, and in tests), after those being started."""
    settle()
    with _lock:
        every = [spare for waiting in _spares.values() for spare in waiting]
        _spares.clear()
    for spare in every:
        spare.discard()


atexit.register(discard_all)
