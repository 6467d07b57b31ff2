"""Each stage's budget, enforced by the judge against a real worker in the real sandbox: a stage
that runs out is stopped and the verdict keeps every finished stage (evaluator/judge/stage_budget.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from agentforge.evaluator.judge import stage_budget
from agentforge.evaluator.result import EvalJob, Measure, Stage, StageBudget, Status, TimingConfig
from agentforge.sandbox import SandboxConfig, run
from sandbox_helpers import HERE, make_job
from test_pipeline_e2e import CANDIDATE, TASK

from tests.fixtures.sandbox import quiet

# 16 s in all, 1.6 s of it kept back: the build (child start, torch import, a g++ build) may run
# to 10.8 s, correctness to 11.5 s, timing to 13.0 s from the parent's start.
BUDGET = StageBudget(build=0.75, correctness=0.05, timing=0.1, profile=0.1)
TIMEOUT_S = 16.0

# The correctness stage calls forward 9 times on one shape (5 trials and the extra checks, measured
# 2026-11-26); the calls after those are the timing stage's.
CORRECTNESS_CALLS = 9


def _candidate(hang: str) -> str:
    """The honest ReLU, whose forward sleeps for an hour: always, or once correctness is done."""
    forward = "    def forward(self, x):\n"
    assert forward in CANDIDATE
    if hang == "timing":
        body = (forward + "        CALLS.append(1)\n"
                f"        if len(CALLS) > {CORRECTNESS_CALLS}:\n            time.sleep(3600)\n")
        return "import time\nCALLS = []\n" + CANDIDATE.replace(forward, body)
    if hang == "correctness":
        return "import time\n" + CANDIDATE.replace(forward, forward + "        time.sleep(3600)\n")
    return CANDIDATE


def _job(hang: str) -> EvalJob:
    return EvalJob(task_name="relu_e2e", task_source=TASK, candidate_source=_candidate(hang), backend="cpu",
                   device="cpu", shapes=("default",), budget=BUDGET,
                   measure=Measure(baselines=("eager",), compile_modes=()),
                   timing=TimingConfig(warmup=1, min_reps=5, max_reps=5, time_cap_s=1.0))


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> SandboxConfig:
    root = tmp_path_factory.mktemp("stage-budget")  # one build cache: later builds are warm
    return quiet(root, timeout_s=TIMEOUT_S)


@pytest.mark.slow
def test_normal_path_reports_what_each_stage_used(config: SandboxConfig) -> None:
    result = run(_job("none"), config)
    assert result.status == Status.OK and result.stage == Stage.DONE, (result.error, result.flags)
    assert result.correct and result.timing is not None and result.candidate_us is not None
    report = result.provenance.track_settings["stage_budget"]
    assert report["ran_out"] is None and report["total_s"] == TIMEOUT_S
    assert set(report["used_s"]) == {"build", "correctness", "timing", "profile"}


@pytest.mark.slow
def test_timing_that_runs_out_keeps_correctness(config: SandboxConfig) -> None:
    started = time.monotonic()
    result = run(_job("timing"), config)
    took = time.monotonic() - started
    assert result.status == Status.TIMEOUT and result.stage == Stage.TIMING, result.error
    assert result.error is not None and result.error.type == "StageTimeout"
    assert "the timing stage ran out of its budget after" in result.error.message
    assert result.correct and result.compiled  # the finished stages' records are kept
    assert result.timing is None and result.candidate_us is None and not result.accepted
    assert not result.flags
    ran_out = result.provenance.track_settings["stage_budget"]["ran_out"]
    assert ran_out["stage"] == "timing" and 0 < ran_out["after_s"] < TIMEOUT_S
    assert took < TIMEOUT_S  # the judge answered, not the sandbox's hard limit


@pytest.mark.slow
def test_correctness_that_hangs_is_named(config: SandboxConfig) -> None:
    result = run(_job("correctness"), config)
    assert result.status == Status.TIMEOUT and result.stage == Stage.CORRECTNESS, result.error
    assert result.error is not None and "the correctness stage ran out" in result.error.message
    assert result.compiled and result.correctness == () and result.timing is None
    assert not result.flags


def test_a_stuck_judge_still_hands_back_the_kept_verdict(tmp_path: Path) -> None:
    """The judge itself never returns: the stage clock's thread writes the verdict it kept
    before the parent's hard limit."""
    config = quiet(tmp_path, entry="budget_entries:stuck_in_timing", python_paths=(str(HERE),), torch_switches=False,
                   timeout_s=8.0, kill_grace_s=0.5)
    started = time.monotonic()
    result = run(make_job("pass"), config)
    assert time.monotonic() - started < 8.0
    assert result.status == Status.TIMEOUT and result.stage == Stage.TIMING, result.error
    assert result.error is not None and result.error.type == "StageTimeout"
    assert result.correct  # the kept record came back
    assert result.provenance.sandbox.startswith("process")


def test_a_judge_that_holds_the_gil_is_ended_by_the_hard_limit_which_names_the_last_stage(tmp_path: Path) -> None:
    """Past the clock's grace only the parent's limit is left; its verdict stays at the sandbox
    stage (stderr is the candidate's to write too) but its message says the judge's last mark."""
    config = quiet(tmp_path, entry="budget_entries:stuck_holding_the_gil", python_paths=(str(HERE),),
                   torch_switches=False, timeout_s=4.0, kill_grace_s=0.5)
    result = run(make_job("pass"), config)
    assert result.status == Status.TIMEOUT and result.stage == Stage.SANDBOX, result.error
    assert result.error is not None and result.error.type == "Timeout"
    assert result.error.message.startswith("wall-clock budget of 4 s ran out (the judge's last stage mark on "
                                           "stderr: timing, from "), result.error.message


def test_the_sandbox_s_stage_shares_replace_the_job_s(tmp_path: Path) -> None:
    config = quiet(tmp_path, entry="budget_entries:stuck_in_timing", python_paths=(str(HERE),), torch_switches=False,
                   timeout_s=8.0, kill_grace_s=0.5,
                   stage_shares=(("build", 0.3), ("correctness", 0.1), ("timing", 0.1)))
    result = run(make_job("pass"), config)
    assert result.status == Status.TIMEOUT and result.stage == Stage.TIMING, result.error
    report = result.provenance.track_settings["stage_budget"]
    usable = 8.0 - stage_budget.reserve_s(8.0)
    assert report["deadlines_s"]["timing"] == pytest.approx(0.5 * usable, abs=1e-3)
    assert report["ran_out"]["deadline_s"] == pytest.approx(0.5 * usable, abs=1e-3)
