"""Tiny test-only evaluators the sandbox child can call instead of the real pipeline.

`exec_candidate` runs the candidate source (which does whatever misbehaviour a test needs) and
returns an ok EvalResult carrying what the candidate left in `RESULT_NOTE`; exceptions become a
runtime_error the way the real pipeline reports them (type = the exception's class name).
"""

from __future__ import annotations

import traceback
from typing import Any

from agentforge.evaluator.result import ErrorRecord, EvalJob, EvalResult, Stage, Status

from agentforge.candidate import code_hash


def exec_candidate(job: EvalJob) -> EvalResult:
    namespace: dict[str, Any] = {"__name__": "candidate", "job": job}
    base = {"task_name": job.task_name, "candidate_hash": code_hash(job.candidate_source),
            "backend": job.backend}
    try:
        exec(compile(job.candidate_source, "candidate.py", "exec"), namespace)
    except Exception as exc:
        error = ErrorRecord(type=type(exc).__name__, message=str(exc),
                            traceback_tail=traceback.format_exc()[-2000:])
        return EvalResult(**base, status=Status.RUNTIME_ERROR, stage=Stage.LOAD, error=error)
    note = str(namespace.get("RESULT_NOTE", ""))
    return EvalResult(**base, status=Status.OK, stage=Stage.DONE, candidate_meta={"note": note})


def raises(job: EvalJob) -> EvalResult:
    raise RuntimeError("the entry itself failed")


def returns_none(job: EvalJob) -> None:
    return None


def report_switches(job: EvalJob) -> EvalResult:
    """The numeric switches the child pinned, as the candidate would see them."""
    import torch

    note = (f"tf32={torch.backends.cuda.matmul.allow_tf32},{torch.backends.cudnn.allow_tf32} "
            f"precision={torch.get_float32_matmul_precision()} "
            f"deterministic={torch.backends.cudnn.deterministic}")
    return EvalResult(task_name=job.task_name, candidate_hash=code_hash(job.candidate_source),
                      backend=job.backend, status=Status.OK, stage=Stage.DONE, candidate_meta={"note": note})
