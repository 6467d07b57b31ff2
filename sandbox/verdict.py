"""EvalResults for evaluations that produced no result of their own: timeouts and crashes.

Classification is by what the parent observed (the wait status, its own watchdog, the frame
parser), never by reading text the candidate could have printed; the stderr tail is kept as
evidence only.
"""

from __future__ import annotations

import dataclasses
import datetime
import signal
import socket

from agentforge.evaluator.judge.stage_budget import last_stage_mark
from agentforge.evaluator.result import ErrorRecord, EvalJob, EvalProvenance, EvalResult, Stage, Status
from agentforge.sandbox.watchdog import Breach

from agentforge.candidate import code_hash

# Error types by the signal that ended the child.
SIGNAL_TYPES = {
    signal.SIGSEGV: "Segfault",
    signal.SIGBUS: "BusError",
    signal.SIGABRT: "Abort",
    signal.SIGFPE: "FloatingPointError",
    signal.SIGILL: "IllegalInstruction",
    signal.SIGXCPU: "CpuLimit",
    signal.SIGXFSZ: "FileSizeLimit",
    signal.SIGKILL: "Killed",
}


def now() -> str:
    """The UTC time, as provenance records it."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"SIG{signum}"


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What the parent knows about one run, stamped into the result."""

    sandbox: str
    started_at: str
    duration_s: float
    isolation: str = ""  # bwrap | unshare | none | docker (EvalProvenance.isolation)


def provenance(job: EvalJob, info: RunInfo) -> EvalProvenance:
    return EvalProvenance(track=job.track, host=socket.gethostname(), started_at=info.started_at,
                          duration_s=info.duration_s, sandbox=info.sandbox, isolation=info.isolation)


def stamp(result: EvalResult, sandbox: str, isolation: str, wall_s: float | None = None) -> EvalResult:
    """The child's own verdict with what only the parent knows: the sandbox and its isolation, and
    (from the parent's wall time `wall_s`) the seconds the job spent outside the judge's pipeline:
    starting the child (or taking a warm spare), handing the job over and the verdict back."""
    seconds = dict(result.provenance.stage_seconds)
    if wall_s is not None:
        seconds["sandbox"] = round(max(0.0, wall_s - result.provenance.duration_s), 3)
        seconds["wall"] = round(wall_s, 3)
    prov = dataclasses.replace(result.provenance, sandbox=sandbox, isolation=isolation, stage_seconds=seconds)
    return dataclasses.replace(result, provenance=prov)


def failure(job: EvalJob, status: Status, error: ErrorRecord, info: RunInfo) -> EvalResult:
    return EvalResult(
        task_name=job.task_name, candidate_hash=code_hash(job.candidate_source), backend=job.backend,
        status=status, stage=Stage.SANDBOX, error=error, provenance=provenance(job, info),
        candidate_meta=dict(job.candidate_meta),
    )


def timeout(job: EvalJob, budget_s: float, stderr_tail: str, info: RunInfo) -> EvalResult:
    """The hard limit: the parent killed the child. Its stage stays `sandbox`; the message adds the
    judge's last stage mark on stderr when there is one (`stage_budget.last_stage_mark`)."""
    mark = last_stage_mark(stderr_tail)
    message = f"wall-clock budget of {budget_s:g} s ran out" + (f" ({mark})" if mark else "")
    error = ErrorRecord(type="Timeout", message=message, stderr_tail=stderr_tail)
    return failure(job, Status.TIMEOUT, error, info)


def memory_limit(job: EvalJob, rss_bytes: int, limit_gb: float, stderr_tail: str,
                 info: RunInfo) -> EvalResult:
    message = (f"the watchdog killed the child: resident memory {rss_bytes / 2**30:.2f} GiB "
               f"exceeded the {limit_gb:g} GiB limit")
    error = ErrorRecord(type="MemoryLimit", message=message, signal=int(signal.SIGKILL),
                        stderr_tail=stderr_tail)
    return failure(job, Status.CRASH, error, info)


_BREACH_TYPES = {"memory": "MemoryLimit", "processes": "ProcessLimit", "disk": "DiskLimit"}


def over_limit(job: EvalJob, breach: Breach, stderr_tail: str, info: RunInfo) -> EvalResult:
    """The watchdog killed the tree for going over a limit."""
    gib = 2**30
    message = {
        "memory": f"memory of the job's processes {breach.used / gib:.2f} GiB (shared pages counted once) "
                  f"exceeded the {breach.limit / gib:g} GiB limit (sandbox.memory_gb)",
        "processes": f"the job ran {breach.used} processes at once, its limit is {breach.limit}: a fork burst",
        "disk": f"the job's files (work folder, /tmp, /dev/shm) took {breach.used / gib:.2f} GiB, over the "
                f"{breach.limit / gib:g} GiB limit (sandbox.disk_gb)" + (f": {breach.detail}" if breach.detail else ""),
    }[breach.kind]
    error = ErrorRecord(type=_BREACH_TYPES[breach.kind], message=f"the watchdog killed the child: {message}",
                        signal=int(signal.SIGKILL), stderr_tail=stderr_tail)
    return failure(job, Status.CRASH, error, info)


def exit_signal(returncode: int, wrapped_by_bwrap: bool) -> int | None:
    """The signal that ended the child, from Popen's returncode (bwrap reports 128 + signal)."""
    if returncode < 0:
        return -returncode
    if wrapped_by_bwrap and 128 < returncode <= 128 + 64:
        return returncode - 128
    return None


def crashed(job: EvalJob, returncode: int, wrapped_by_bwrap: bool, reason: str, stderr_tail: str,
            info: RunInfo, garbled: bool = False) -> EvalResult:
    """The child ended without a valid result: by a signal, or exiting with `reason`. `garbled`:
    bytes came on the result channel but were not one valid frame (type BadResult, else NoResult)."""
    signum = exit_signal(returncode, wrapped_by_bwrap)
    if signum is not None:
        name = signal_name(signum)
        error = ErrorRecord(
            type=SIGNAL_TYPES.get(signum, "Signal"), message=f"child killed by signal {signum} ({name})",
            signal=signum, exit_code=returncode, stderr_tail=stderr_tail,
        )
    else:
        error = ErrorRecord(type="BadResult" if garbled else "NoResult",
                            message=f"child exited with code {returncode}: {reason}",
                            exit_code=returncode, stderr_tail=stderr_tail)
    return failure(job, Status.CRASH, error, info)


def memory_cgroup(job: EvalJob, limit_gb: float, exit_code: int | None, stderr_tail: str,
                  info: RunInfo) -> EvalResult:
    message = f"the memory cgroup ({limit_gb:g} GiB) OOM-killed the child"
    error = ErrorRecord(type="MemoryLimit", message=message, signal=int(signal.SIGKILL),
                        exit_code=exit_code, stderr_tail=stderr_tail)
    return failure(job, Status.CRASH, error, info)


def sandbox_error(job: EvalJob, message: str, info: RunInfo) -> EvalResult:
    """The sandbox itself could not run the child (spawn failed, workdir unusable)."""
    return failure(job, Status.CRASH, ErrorRecord(type="SandboxError", message=message), info)
