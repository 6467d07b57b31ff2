"""A test-only entry the sandbox child can call: it reports the device the job reached it with
and the GPUs the child process sees, touching no GPU."""

from __future__ import annotations

import os

from agentforge.evaluator.result import EvalJob, EvalResult, Stage, Status

from agentforge.candidate import code_hash


def report_device(job: EvalJob) -> EvalResult:
    note = f"{job.device} visible={os.environ.get('CUDA_VISIBLE_DEVICES')}"
    return EvalResult(task_name=job.task_name, candidate_hash=code_hash(job.candidate_source),
                      backend=job.backend, status=Status.OK, stage=Stage.DONE, candidate_meta={"note": note})
