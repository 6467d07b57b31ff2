"""The worker's seccomp filters, installed for real in a forked process: what each refuses dies of
SIGSYS, what an honest worker does (threads, an OpenMP team of two, calls on itself, builds before
the seal) still runs."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from agentforge.evaluator.judge import proc_view
from agentforge.sandbox import limits, seccomp

pytestmark = pytest.mark.skipif(seccomp.unavailable_reason() is not None, reason="no seccomp here")

LIBC = ctypes.CDLL(None, use_errno=True)


def run_filtered(action: Callable[[], object], seal: bool = False) -> str:
    """`action` in a forked child under the guard (and the seal): "ok", "raised ..." or the signal
    that ended it."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            limits.no_new_privileges()
            seccomp.install(seccomp.guard_program(os.getpid()))
            if seal:
                seccomp.install(seccomp.seal_program())
            out = action()
            os.write(write, f"ok {out}".encode())
        except BaseException as exc:
            os.write(write, f"raised {type(exc).__name__} {exc}".encode())
            code = 3
        os._exit(code)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    said = os.read(read, 4096).decode()
    os.close(read)
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return said


REFUSED = {
    "setpriority on the parent": lambda: os.setpriority(os.PRIO_PROCESS, os.getppid(), 19),
    "setpriority on the user": lambda: os.setpriority(os.PRIO_USER, 0, 19),
    "sched_setaffinity on the parent": lambda: os.sched_setaffinity(os.getppid(), {0}),
    "sched_setscheduler on the parent": lambda: os.sched_setscheduler(os.getppid(), os.SCHED_OTHER,
                                                                             os.sched_param(0)),
    "sched_setparam on the parent": lambda: os.sched_setparam(os.getppid(), os.sched_param(0)),
    "prlimit64 on the parent": lambda: resource.prlimit(os.getppid(), resource.RLIMIT_CORE),
    "kill the parent": lambda: os.kill(_below(os.getppid()), 0),
    "kill the process group": lambda: os.kill(0, 0),
    "kill everyone": lambda: os.kill(-1, 0),
    "tgkill into the parent": lambda: LIBC.syscall(234 if platform.machine() == "x86_64" else 131,
                                                          os.getppid(), os.getppid(), 0),
    "ptrace the parent": lambda: LIBC.ptrace(16, os.getppid(), None, None),
    "process_vm_writev": lambda: LIBC.process_vm_writev(os.getppid(), None, 0, None, 0, 0),
    "unshare": lambda: LIBC.unshare(0x10000000),  # CLONE_NEWUSER
    "clone(CLONE_VM) helper": lambda: _clone_vm_helper(),
    "clone into a new user namespace": lambda: _clone_new_namespace(0x10000000),  # CLONE_NEWUSER
    "clone into a new mount namespace": lambda: _clone_new_namespace(0x00020000),  # CLONE_NEWNS
}


def _below(parent: int) -> int:
    """The parent when its pid is below this process's, as the judge's always is in the worker's
    pid namespace (the guard's rule: kill only itself or a higher pid); else init, pid 1. Here, in
    the host's namespace, the pid counter wraps (pid_max is 32768 on the 2-core VM), and a child
    forked after a wrap gets a pid below its parent's: a fresh-clone run failed on that."""
    return parent if parent < os.getpid() else 1


def _clone_new_namespace(flags: int) -> int:
    """A fork (the raw clone call) whose child starts in a namespace of its own: out of the
    worker's mount namespace, where the seal's census looks."""
    number = 56 if platform.machine() == "x86_64" else 220
    rc = LIBC.syscall(number, flags | signal.SIGCHLD, None, None, None, None)
    if rc == 0:
        os._exit(0)
    if rc > 0:
        os.waitpid(rc, 0)
    return rc


def _clone_vm_helper() -> int:
    stack = ctypes.create_string_buffer(1 << 16)
    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(lambda _: 0)
    return LIBC.clone(callback, ctypes.c_void_p(ctypes.addressof(stack) + (1 << 16)), 0x100 | signal.SIGCHLD, None)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_guard_kills_calls_aimed_at_another_process(name: str) -> None:
    assert run_filtered(REFUSED[name]) == "SIGSYS", name


ALLOWED = {
    "setpriority on itself": lambda: os.setpriority(os.PRIO_PROCESS, 0, 5),
    "setpriority on its own pid": lambda: os.setpriority(os.PRIO_PROCESS, os.getpid(), 6),
    "sched_setaffinity on itself": lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)),
    "prlimit on itself": lambda: resource.prlimit(0, resource.RLIMIT_CORE),
    "kill itself with 0": lambda: os.kill(os.getpid(), 0),
    "a thread signalled": lambda: signal.pthread_kill(threading.main_thread().ident, 0),
    "a thread started": lambda: _thread_ran(),
    "a build's compiler run": lambda: subprocess.run(["true"], check=True).returncode,
}


def _thread_ran() -> bool:
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(1))
    thread.start()
    thread.join()
    assert seen == [1]
    return True


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_guard_lets_the_worker_act_on_itself(name: str) -> None:
    assert run_filtered(ALLOWED[name]).startswith("ok"), name


def test_clone3_answers_enosys_so_libc_falls_back_to_clone() -> None:
    def clone3() -> int:
        rc = LIBC.syscall(435, None, 0)
        return ctypes.get_errno() if rc == -1 else rc

    assert run_filtered(clone3) == f"ok {errno.ENOSYS}"


def test_seal_refuses_every_new_process_and_keeps_threads() -> None:
    assert run_filtered(lambda: subprocess.run(["true"]), seal=True) == "SIGSYS"
    assert run_filtered(os.fork, seal=True) == "SIGSYS"
    assert run_filtered(_thread_ran, seal=True) == "ok True"


OPENMP = r"""
#include <omp.h>
extern "C" int team_sum(float* y, long n) {
    int team = 0;
    #pragma omp parallel num_threads(2)
    {
        #pragma omp single
        team = omp_get_num_threads();
        #pragma omp for
        for (long i = 0; i < n; ++i) y[i] = (float)i * 2.f;
    }
    return team;
}
"""


def test_an_openmp_team_of_two_runs_sealed(tmp_path: Path) -> None:
    source = tmp_path / "team.cpp"
    source.write_text(OPENMP)
    library = tmp_path / "libteam.so"
    subprocess.run(["g++", "-O2", "-fopenmp", "-shared", "-fPIC", str(source), "-o", str(library)], check=True)

    # In a fresh interpreter, not a fork of this one: GNU OpenMP is not fork-safe, and a team this
    # process (torch, an earlier test) has started leaves a forked child's team waiting forever.
    script = f"""
import ctypes, os
from agentforge.evaluator.judge import proc_view
from agentforge.sandbox import limits, seccomp
limits.no_new_privileges()
seccomp.install(seccomp.guard_program(os.getpid()))
seccomp.install(seccomp.seal_program())
lib = ctypes.CDLL({str(library)!r})
out = (ctypes.c_float * 1000)()
print("ok", lib.team_sum(out, 1000), out[999])
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["ok", "2", "1998.0"], (proc.returncode, proc.stderr)


def test_filters_are_seen_from_outside() -> None:
    hold_r, hold_w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            limits.no_new_privileges()
            seccomp.install(seccomp.guard_program(os.getpid()))
            seccomp.install(seccomp.seal_program())
            os.write(ready_w, b"1")
            os.read(hold_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"1"
        seen = proc_view.filters_of(pid)
        assert seen and all(t.mode == 2 for t in seen.values())
        assert all(t.filters in (-1, 2) for t in seen.values())
    finally:
        os.write(hold_w, b"0")
        os.close(hold_w)
        os.waitpid(pid, 0)
        for fd in (hold_r, ready_r):
            os.close(fd)
