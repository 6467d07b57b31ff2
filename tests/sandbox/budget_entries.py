"""Test-only entries for the stage budget: a judge that hangs in its own code after a stage
started, so that only the stage clock's own thread can hand the kept verdict back."""

from __future__ import annotations

import time

from agentforge.evaluator.judge.stage_budget import StageClock
from agentforge.evaluator.result import CorrectnessRecord, EvalJob, EvalResult, Stage, Status

from agentforge.candidate import code_hash


def stuck_in_timing(job: EvalJob) -> EvalResult:
    clock = StageClock(job.budget)
    base = EvalResult(task_name=job.task_name, candidate_hash=code_hash(job.candidate_source), backend=job.backend,
                      status=Status.TIMEOUT, stage=Stage.TIMING,
                      correctness=(CorrectnessRecord(shape="default", seed=1, passed=True, max_abs_err=0.0),))
    clock.enter(Stage.CORRECTNESS, None)
    clock.enter(Stage.TIMING, base)
    time.sleep(3600)  # the judge's own baseline, say, that never returns
    return clock.close(base)


def stuck_holding_the_gil(job: EvalJob) -> EvalResult:
    """The judge stuck in a native call that keeps the GIL (ctypes.PyDLL does not release it), so
    the stage clock's thread cannot run either: only the parent's hard limit ends the job."""
    import ctypes

    clock = StageClock(job.budget)
    clock.enter(Stage.CORRECTNESS, None)
    clock.enter(Stage.TIMING, None)
    ctypes.PyDLL(None).sleep(3600)
    raise AssertionError("unreachable")
