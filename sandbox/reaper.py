"""What a sandbox job leaves behind, reaped: its processes, and the folders of dead jobs.

`python -I -S .../sandbox/reaper.py CMD...`: run CMD, then kill everything it left behind.
Used when isolation is `none` (bwrap and unshare end a run's processes with its pid namespace).
The reaper makes itself a child subreaper, so processes that leave the process group (`setsid`)
and lose their parent are re-parented to it rather than to init, and stay killable; when CMD
exits it SIGKILLs and reaps all of its remaining children, then exits as CMD did (re-raising the
signal that ended it, so the parent sees the same wait status). Standard library only; CMD's
inherited fds pass through.

`python -I -S .../sandbox/reaper.py --die-with-parent PID CMD...`: exec CMD with a parent-death
signal (SIGKILL), so that it dies when agentforge dies, even by SIGKILL; `unshare` (which has no
--die-with-parent of its own) is started this way.

Job folders: each job's folder holds `owner.lock`, locked (flock) by the process that runs the
job for as long as it does. The kernel drops the lock when that process dies, however it dies,
so a later run that finds a folder whose lock it can take knows its owner is gone and removes
it (`claim_job_dir`, `remove_dead_job_dirs`): a job killed with kill -9 no longer leaves gigabytes
of candidate output in /tmp for good.

A folder has no lock for two short moments: between its creation and its claim, and while it is
being removed (the lock file goes with the rest). A process killed in either moment (SIGKILL, or
the CLI's immediate exit on SIGINT while a worker thread was there) used to leave a folder that
no sweep would touch. So `make_job_dir` puts the creator's pid in the name (`job-<pid>-XXXX`),
and a folder with no lock and no `kept` marker whose creator is not alive is dead too. A workdir
kept on purpose (`keep_workdir`) is marked `kept` (`mark_kept`) before its lock goes.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import os
import resource
import shutil
import signal
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_PDEATHSIG = 1
LOCK_NAME = "owner.lock"
KEPT_NAME = "kept"
JOB_PREFIXES = ("job-", "docker-job-")


class JobClaim:
    """The lock that marks a job folder as in use; `release` before or after removing the folder."""

    def __init__(self, fd: int) -> None:
        self.fd: int | None = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def claim_job_dir(job_dir: str | os.PathLike[str]) -> JobClaim:
    """Mark `job_dir` (just created, empty) as owned by this process until `release` or death.

    The lock is taken on a temporary name and renamed into place, so a sweeping process never
    sees an `owner.lock` that is not locked yet.
    """
    path = Path(job_dir)
    tmp = path / f".{LOCK_NAME}.{os.getpid()}"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.rename(tmp, path / LOCK_NAME)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return JobClaim(fd)


def make_job_dir(root: str | os.PathLike[str], prefix: str = "job-") -> tuple[Path, JobClaim]:
    """A new job folder under `root`, named `<prefix><pid>-XXXX`, claimed by this process."""
    import tempfile  # here, not at the top: the reaper script starts with every job

    job_dir = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=root))
    try:
        return job_dir, claim_job_dir(job_dir)
    except BaseException:
        shutil.rmtree(job_dir, ignore_errors=True)
        raise


def mark_kept(job_dir: str | os.PathLike[str]) -> None:
    """Mark a finished job's folder as kept on purpose (`keep_workdir`): no sweep removes it."""
    path = Path(job_dir)
    with contextlib.suppress(OSError):
        (path / KEPT_NAME).write_text("kept by keep_workdir\n")
    (path / LOCK_NAME).unlink(missing_ok=True)


def remove_job_dir(job_dir: str | os.PathLike[str]) -> None:
    """Remove a job's folder, even where its candidate took permissions away (chmod 000)."""
    path = Path(job_dir)
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        _make_removable(path)
        shutil.rmtree(path, ignore_errors=True)


def remove_dead_job_dirs(root: str | os.PathLike[str]) -> list[str]:
    """Remove the job folders under `root` whose owner is dead; returns what was removed.

    A folder is removed when it holds an `owner.lock` that nobody holds, or when it holds no lock
    and no `kept` marker and the process named in it (`make_job_dir`) is not alive (it was killed
    while creating or removing the folder). Folders of live jobs, folders a live process is
    creating or removing, folders kept on purpose, and lock-less folders whose name names no
    process (made before names carried one) are left alone.
    """
    removed = []
    for job_dir in _job_dirs(root):
        with _dead_owner(job_dir) as dead:
            if dead:
                _make_removable(job_dir)
                shutil.rmtree(job_dir, ignore_errors=True)
                removed.append(str(job_dir))
    return removed


def _creator(job_dir: Path) -> int | None:
    """The pid `make_job_dir` put in the folder's name, or None."""
    rest = next((job_dir.name[len(p):] for p in JOB_PREFIXES if job_dir.name.startswith(p)), "")
    pid, sep, _ = rest.partition("-")
    return int(pid) if sep and pid.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, under another user
        return True
    return True


def _job_dirs(root: str | os.PathLike[str]) -> Iterator[Path]:
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(JOB_PREFIXES) and entry.is_dir(follow_symlinks=False):
            yield Path(entry.path)


@contextlib.contextmanager
def _dead_owner(job_dir: Path) -> Iterator[bool]:
    """True (holding the lock while the caller removes the folder) when the owner is gone."""
    try:
        fd = os.open(job_dir / LOCK_NAME, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        creator = _creator(job_dir)
        kept = os.path.lexists(job_dir / KEPT_NAME)
        yield creator is not None and not kept and not _alive(creator)
        return
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _make_removable(job_dir: Path) -> None:
    """A candidate may leave directories without write or search permission (chmod 000): give
    them back to us so rmtree can empty them. Symlinks are never followed."""
    for root, dirs, _files in os.walk(job_dir):  # top-down: each is opened up before it is entered
        for name in dirs:
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                if not os.path.islink(path):
                    os.chmod(path, stat.S_IRWXU)


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "stat").read_text()
            except OSError:
                continue
            if text[text.rindex(")") + 2:].split()[1] == me:
                found.append(int(entry.name))
    return found


def _kill_rest() -> None:
    for _ in range(100):
        children = _children()
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.01)


PARENT_DIED = signal.SIGUSR1


def _parent_died(_signum: int, _frame: object) -> None:
    _kill_rest()
    os._exit(128 + signal.SIGKILL)


def exec_with_parent_death(parent: int, argv: list[str]) -> None:
    """Exec `argv` in this process, which is killed when its parent dies (even if the parent was
    already gone before the signal was armed)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(137)
    os.execvp(argv[0], argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--die-with-parent"]:
        exec_with_parent_death(int(argv[1]), argv[2:])
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # When agentforge dies (even by SIGKILL) the kernel sends PARENT_DIED: the reaper then kills
    # the whole job, grandchildren included (dying at once by SIGKILL would orphan them to init).
    signal.signal(PARENT_DIED, _parent_died)
    libc.prctl(_PR_SET_PDEATHSIG, PARENT_DIED, 0, 0, 0)
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    for fd in range(3, 256):  # the pipes belong to CMD; the reaper must not hold them open
        try:
            os.close(fd)
        except OSError:
            pass
    signal.signal(signal.SIGTERM, lambda *_: os.kill(pid, signal.SIGTERM))
    while True:
        done, status = os.waitpid(pid, 0)
        if done == pid:
            break
    _kill_rest()
    if os.WIFSIGNALED(status):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        os.kill(os.getpid(), os.WTERMSIG(status))
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
