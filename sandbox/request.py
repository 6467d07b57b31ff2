"""What the parent sends the child over the private request pipe: the job and how to run it.

The request travels as one frame (`channel.py`) whose header carries this run's nonce; the child
answers with one frame carrying the same nonce.

Plain frozen dataclasses, JSON through the same strict codec as `EvalResult`; the child trusts
nothing else (not argv, not the environment, not files in its work directory).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentforge.evaluator.result import EvalJob, from_json, to_json


@dataclass(frozen=True)
class Limits:
    """Resource limits the child sets on itself (soft = hard) before it runs the entry."""

    address_space_bytes: int | None  # RLIMIT_AS; None on CUDA jobs (see SandboxConfig)
    cpu_seconds: int  # RLIMIT_CPU soft; hard one second later so SIGXCPU comes first
    file_size_bytes: int  # RLIMIT_FSIZE
    max_processes: int | None  # RLIMIT_NPROC headroom above the uid's current count; None: unset


@dataclass(frozen=True)
class MountOp:
    """One step of the mount namespace the child builds itself under `unshare`.

    kind: readonly-all (remount every other mount read-only), tmpfs (a writable tmpfs at dst),
    mask (a tmpfs at dst, read-only after readonly-all), bind (src -> dst read-write), ro-bind,
    proc (/proc stays writable for a process's own files, its kernel-wide paths turn read-only).
    """

    kind: str
    dst: str = ""
    src: str = ""


@dataclass(frozen=True)
class ChildRequest:
    entry: str  # "module:function" called with the EvalJob, returning an EvalResult
    job: EvalJob
    workdir: str
    limits: Limits
    drop_to_uid: int | None = None  # when the child starts as root: setgroups([]), setgid, setuid
    mounts: tuple[MountOp, ...] = ()  # only under `unshare`; bwrap and docker mount for the child
    torch_switches: bool = True  # TF32 off, highest fp32 matmul precision, cuDNN not autotuned

    def to_json(self) -> str:
        return to_json(self)

    @classmethod
    def from_json(cls, text: str) -> ChildRequest:
        return from_json(cls, text)
