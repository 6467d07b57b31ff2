"""The candidate worker's seccomp filters: classic BPF built here with `struct`, installed through
`seccomp(2)` via ctypes (standard library only; the worker runs on bare GPU images).

Two filters, both fail closed with SECCOMP_RET_KILL_PROCESS (the whole worker dies of SIGSYS, which
the judge turns into a `refused_syscall` flag):

- `guard`, installed at setup, before any candidate code: nothing aimed at another process. No
  ptrace, no process_vm_readv/writev, no pidfd_send_signal/pidfd_getfd, no unshare/setns; the
  priority, scheduling, affinity, rlimit, I/O-priority, NUMA and perf calls only on the worker itself
  (pid argument 0 or the worker's own pid: BPF sees the arguments, not whose thread a tid is, so a
  sibling thread's tid is refused too); kill only to itself or to a higher pid (the compiler
  processes its builds start: a pid namespace hands out pids upwards, so the judge, which forked the
  worker, is always below), never to a group or to -1; tkill/tgkill/rt_(tg)sigqueueinfo only within
  its own thread group; no clone that shares memory without being a thread (CLONE_VM without
  CLONE_THREAD), except CLONE_VFORK (posix_spawn: the parent waits until the child executes), and
  none into a new namespace: whatever the worker starts stays in its mount namespace, where the
  judge's census at the seal finds it (`evaluator.judge.proc_view.worker_helpers`).
  clone3 answers ENOSYS: its flags sit in memory a filter cannot read, and glibc falls back to clone.
- `seal`, installed when the judge asks, before the timing stage: no new process at all (fork, vfork,
  clone without CLONE_THREAD). The builds are over by then (a compiler is a process), so whatever
  runs while the judge times is a thread of the worker, counted by its CPU clock and thread census.

Both apply to every thread at once (SECCOMP_FILTER_FLAG_TSYNC) and to everything the worker
starts; a filter cannot be removed. x86_64 and aarch64; any other ABI (32-bit or x32 calls on
x86_64 included) is refused.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct

# classic BPF
_LD_W_ABS = 0x20
_JEQ_K, _JGT_K, _JGE_K, _JSET_K = 0x15, 0x25, 0x35, 0x45
_RET_K = 0x06

RET_KILL_PROCESS = 0x80000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000

CLONE_VM, CLONE_VFORK, CLONE_THREAD = 0x100, 0x4000, 0x10000
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET: a child in a namespace of its own
CLONE_NEW_ANY = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
PRIO_PROCESS, IOPRIO_WHO_PROCESS = 0, 1
_X32_BIT = 0x40000000
_NEGATIVE = 0x80000000  # a pid_t's low word from here on is a group or -1

_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_SECCOMP = {"x86_64": 317, "aarch64": 277}
_NR = {
    "x86_64": {"fork": 57, "vfork": 58, "clone": 56, "clone3": 435, "ptrace": 101, "process_vm_readv": 310,
               "process_vm_writev": 311, "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129,
               "rt_tgsigqueueinfo": 297, "pidfd_send_signal": 424, "pidfd_getfd": 438, "process_madvise": 440,
               "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144, "sched_setaffinity": 203,
               "sched_setattr": 314, "prlimit64": 302, "ioprio_set": 251, "migrate_pages": 256,
               "move_pages": 279, "perf_event_open": 298, "unshare": 272, "setns": 308},
    "aarch64": {"clone": 220, "clone3": 435, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
                "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
                "pidfd_send_signal": 424, "pidfd_getfd": 438, "process_madvise": 440, "setpriority": 140,
                "sched_setparam": 118, "sched_setscheduler": 119, "sched_setaffinity": 122, "sched_setattr": 274,
                "prlimit64": 261, "ioprio_set": 30, "migrate_pages": 238, "move_pages": 239,
                "perf_event_open": 241, "unshare": 97, "setns": 268},
}
# (syscall, index of its pid argument): allowed on the worker itself only
_SELF_ONLY = (("sched_setparam", 0), ("sched_setscheduler", 0), ("sched_setaffinity", 0), ("sched_setattr", 0),
              ("prlimit64", 0), ("migrate_pages", 0), ("move_pages", 0), ("perf_event_open", 1))
_OWN_GROUP = (("tkill", 0), ("tgkill", 0), ("rt_sigqueueinfo", 0), ("rt_tgsigqueueinfo", 0))
_DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_send_signal", "pidfd_getfd",
           "process_madvise", "unshare", "setns")
GUARDED = (*_DENIED, *(n for n, _ in _SELF_ONLY), *(n for n, _ in _OWN_GROUP), "setpriority", "ioprio_set",
           "kill", "clone", "clone3")
SEALED = ("fork", "vfork", "clone")


class SeccompUnavailable(OSError):
    """This machine or process cannot install the filter; the message says why."""


def _arg(index: int) -> int:
    """Offset of the low 32 bits of syscall argument `index` in `struct seccomp_data` (little
    endian): pid_t, int and the clone flags tested here all live there."""
    return 16 + 8 * index


class _Program:
    """A tiny assembler: jumps name labels, resolved to relative offsets at the end."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int = 0, jt: object = 0, jf: object = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def load(self, offset: int) -> None:
        self.op(_LD_W_ABS, offset)

    def ret(self, value: int) -> None:
        self.op(_RET_K, value)

    def assemble(self) -> bytes:
        out = b""
        for at, (code, jt, jf, k) in enumerate(self.code):
            jumps = [self.labels[j] - at - 1 if isinstance(j, str) else int(j) for j in (jt, jf)]
            if not all(0 <= j <= 255 for j in jumps):
                raise ValueError("seccomp program jump out of range")
            out += struct.pack("=HBBI", code, jumps[0], jumps[1], k & 0xFFFFFFFF)
        return out


def _prologue(prog: _Program, machine: str) -> None:
    prog.load(4)  # arch
    prog.op(_JEQ_K, _ARCH[machine], 0, "kill")
    prog.load(0)  # nr
    if machine == "x86_64":
        prog.op(_JGE_K, _X32_BIT, "kill", 0)


def _self_pid(prog: _Program, index: int, own: int, zero_is_self: bool = True) -> None:
    prog.load(_arg(index))
    if zero_is_self:
        prog.op(_JEQ_K, 0, "allow", 0)
    prog.op(_JEQ_K, own, "allow", "kill")


def guard_program(own_pid: int, machine: str | None = None) -> bytes:
    machine = machine or platform.machine()
    nr = _NR[machine]
    prog = _Program()
    _prologue(prog, machine)
    names = [n for n in GUARDED if n in nr]
    for name in names:
        prog.op(_JEQ_K, nr[name], f"nr_{name}", 0)
    prog.ret(RET_ALLOW)
    pid_args = dict(_SELF_ONLY) | dict(_OWN_GROUP)
    for name in names:
        prog.label(f"nr_{name}")
        if name in _DENIED:
            prog.ret(RET_KILL_PROCESS)
        elif name == "clone3":
            prog.ret(RET_ERRNO | errno.ENOSYS)
        elif name == "clone":
            prog.load(_arg(0))
            prog.op(_JSET_K, CLONE_NEW_ANY, "kill", 0)
            prog.op(_JSET_K, CLONE_THREAD, "allow", 0)
            prog.op(_JSET_K, CLONE_VM, 0, "allow")
            prog.op(_JSET_K, CLONE_VFORK, "allow", "kill")
        elif name == "kill":  # itself, or a process it started (above it); never a group or -1
            prog.load(_arg(0))
            prog.op(_JEQ_K, own_pid, "allow", 0)
            prog.op(_JGE_K, _NEGATIVE, "kill", 0)
            prog.op(_JGT_K, own_pid, "allow", "kill")
        elif name in ("setpriority", "ioprio_set"):
            prog.load(_arg(0))
            prog.op(_JEQ_K, PRIO_PROCESS if name == "setpriority" else IOPRIO_WHO_PROCESS, 0, "kill")
            _self_pid(prog, 1, own_pid)
        else:
            _self_pid(prog, pid_args[name], own_pid, zero_is_self=name not in dict(_OWN_GROUP))
    _epilogue(prog)
    return prog.assemble()


def seal_program(machine: str | None = None) -> bytes:
    machine = machine or platform.machine()
    nr = _NR[machine]
    prog = _Program()
    _prologue(prog, machine)
    for name in ("fork", "vfork"):
        if name in nr:
            prog.op(_JEQ_K, nr[name], "kill", 0)
    prog.op(_JEQ_K, nr["clone"], 0, "allow")
    prog.load(_arg(0))
    prog.op(_JSET_K, CLONE_THREAD, "allow", "kill")
    _epilogue(prog)
    return prog.assemble()


def _epilogue(prog: _Program) -> None:
    prog.label("allow")
    prog.ret(RET_ALLOW)
    prog.label("kill")
    prog.ret(RET_KILL_PROCESS)


def _libc() -> ctypes.CDLL:
    """The C library already in this process (no `find_library`: it starts a process, which the
    seal forbids and costs tens of milliseconds)."""
    return ctypes.CDLL(None, use_errno=True)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_SET_MODE_FILTER, _GET_ACTION_AVAIL, _FLAG_TSYNC = 1, 2, 1


def unavailable_reason() -> str | None:
    """None when this process can install the filters, else why not."""
    machine = platform.machine()
    if machine not in _NR:
        return f"no seccomp filter for {machine} (x86_64 and aarch64 only)"
    libc = _libc()
    action = ctypes.c_uint32(RET_KILL_PROCESS)
    if libc.syscall(ctypes.c_long(_SECCOMP[machine]), _GET_ACTION_AVAIL, 0, ctypes.byref(action)) != 0:
        return f"the kernel cannot kill a process from seccomp: {os.strerror(ctypes.get_errno())}"
    return None


def install(program: bytes) -> None:
    """Install `program` on every thread of this process (no_new_privs must be set, or root)."""
    reason = unavailable_reason()
    if reason:
        raise SeccompUnavailable(reason)
    libc = _libc()
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    rc = libc.syscall(ctypes.c_long(_SECCOMP[platform.machine()]), _SET_MODE_FILTER, _FLAG_TSYNC,
                      ctypes.byref(fprog))
    if rc != 0:
        why = os.strerror(ctypes.get_errno()) if rc < 0 else f"thread {rc} could not be synchronised"
        raise SeccompUnavailable(f"seccomp filter refused: {why}")




def guard() -> str:
    """The guard filter on this process (the worker, at setup): "installed", or why not."""
    try:
        install(guard_program(os.getpid()))
    except (SeccompUnavailable, OSError, KeyError) as exc:
        return f"unavailable: {exc}"
    return "installed"


def seal() -> dict[str, str]:
    """The seal on this process, as the reply to the judge's `seal` request."""
    try:
        install(seal_program())
    except (SeccompUnavailable, OSError, KeyError) as exc:
        return {"sealed": f"unavailable: {exc}"}
    return {"sealed": "installed"}
