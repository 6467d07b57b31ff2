"""`python -I -S .../sandbox/reaper.py CMD...`: run CMD, then kill everything it left behind.

Used when isolation is `none` (bwrap and unshare end a run's processes with its pid namespace).
The reaper makes itself a child subreaper, so processes that leave the process group (`setsid`)
and lose their parent are re-parented to it rather than to init, and stay killable; when CMD
exits it SIGKILLs and reaps all of its remaining children, then exits as CMD did (re-raising the
signal that ended it, so the parent sees the same wait status). Standard library only; CMD's
inherited fds pass through.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
import sys
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


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


def main(argv: list[str]) -> int:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: die with the sandbox parent
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
