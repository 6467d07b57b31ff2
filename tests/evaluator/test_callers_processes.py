"""A judge run in the caller's process (a library caller, a test) checks at the seal that the
worker left no process of its own behind. A process the caller started before the evaluation is
not the candidate's: it must not flag an honest candidate (it did, for every in-process verdict
after any earlier test left a child running)."""

from __future__ import annotations

import subprocess
import sys

from agentforge.evaluator.api import make_job
from agentforge.evaluator.pipeline import run_pipeline
from agentforge.evaluator.result import Measure, TimingConfig

from agentforge.candidate import Candidate
from agentforge.task import Task
from tests.fixtures import relu

QUICK = TimingConfig(warmup=1, min_reps=3, max_reps=5, time_cap_s=0.2, recheck_fraction=0.5)


def test_a_process_the_caller_started_before_is_not_the_workers() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    try:
        job = make_job(Task("relu", relu.task()), Candidate(relu.lean_candidate("callers_relu"), backend="cpu"),
                       device="cpu", measure=Measure(baselines=("eager",), compile_modes=()), timing=QUICK)
        result = run_pipeline(job)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.accepted, result.summary()
    assert "worker_unsealed" not in [f.rule for f in result.flags]
