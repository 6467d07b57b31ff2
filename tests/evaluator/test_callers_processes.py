"""A judge run in the caller's process (a library caller, a test) checks at the seal that the
worker left no process of its own behind. A process the caller started, before the evaluation or
during it (another thread's build, another evaluation's worker), is not the candidate's: it must
not flag an honest candidate (it did, for every in-process verdict after any earlier test left a
child running, and now and then in CI for one started while the worker ran)."""

from __future__ import annotations

import subprocess
import sys
import threading

from agentforge.evaluator.api import make_job
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import Measure, TimingConfig
from agentforge.sandbox.worker import launch_worker

from agentforge.candidate import Candidate
from agentforge.task import Task
from tests.fixtures import relu

QUICK = TimingConfig(warmup=1, min_reps=3, max_reps=5, time_cap_s=0.2, recheck_fraction=0.5)
SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def _job() -> object:
    return make_job(Task("relu", relu.task()), Candidate(relu.lean_candidate("callers_relu"), backend="cpu"),
                    device="cpu", measure=Measure(baselines=("eager",), compile_modes=()), timing=QUICK)


def test_a_process_the_caller_started_before_is_not_the_workers() -> None:
    sleeper = subprocess.Popen(SLEEPER)
    try:
        result = run_pipeline(_job(), launch_worker)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.accepted, result.summary()
    assert "worker_unsealed" not in [f.rule for f in result.flags]


def test_processes_the_caller_starts_while_the_worker_runs_are_not_the_workers() -> None:
    started: list[subprocess.Popen] = []
    done = threading.Event()

    def keep_starting() -> None:  # another thread of the caller's, starting processes all along
        while not done.is_set():
            started.append(subprocess.Popen(SLEEPER))
            done.wait(0.3)

    thread = threading.Thread(target=keep_starting)
    thread.start()
    try:
        result = run_pipeline(_job(), launch_worker)
    finally:
        done.set()
        thread.join()
        for proc in started:
            proc.kill()
            proc.wait()
    assert len(started) >= 3  # some began after the worker did, and lived through its seal
    assert result.accepted, result.summary()
    assert "worker_unsealed" not in [f.rule for f in result.flags]
