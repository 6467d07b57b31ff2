"""The stage clock's arithmetic and verdicts, without a sandbox (evaluator/judge/stage_budget.py)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from agentforge.evaluator.judge import stage_budget
from agentforge.evaluator.result import CorrectnessRecord, EvalJob, EvalResult, Stage, StageBudget, Status


def _result(status: Status = Status.TIMEOUT, stage: Stage = Stage.TIMING) -> EvalResult:
    return EvalResult(task_name="t", candidate_hash="h", backend="cpu", status=status, stage=stage,
                      correctness=(CorrectnessRecord(shape="default", seed=1, passed=True),))


def test_deadlines_are_cumulative_shares_of_the_usable_total() -> None:
    budget = StageBudget(total_s=600.0)
    found = stage_budget.deadlines(budget)
    usable = 600.0 - stage_budget.RESERVE_S
    assert found == pytest.approx({"build": 0.80 * usable, "correctness": 0.90 * usable,
                                   "timing": 0.95 * usable, "profile": usable})


def test_the_sandbox_total_caps_the_job_s_own() -> None:
    assert stage_budget.for_sandbox(StageBudget(), 600.0, now=5.0) == StageBudget(total_s=600.0, started_monotonic=5.0)
    assert stage_budget.for_sandbox(StageBudget(total_s=900.0), 300.0, now=1.0).total_s == 300.0
    assert stage_budget.for_sandbox(StageBudget(total_s=100.0), 300.0, now=1.0).total_s == 100.0


@pytest.mark.parametrize("changes", [{"build": 0.9}, {"timing": -0.1}, {"total_s": float("inf")},
                                     {"profile": float("nan")}])
def test_bad_budgets_are_refused_clearly(changes: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="stage budget"):
        StageBudget(**changes)


def test_a_job_round_trips_its_budget() -> None:
    job = EvalJob("t", "src", "cand", budget=StageBudget(total_s=60.0, build=0.6, timing=0.2, started_monotonic=2.5))
    assert EvalJob.from_json(job.to_json()).budget == job.budget


def test_without_a_total_nothing_is_bounded() -> None:
    clock = stage_budget.StageClock(StageBudget())
    clock.enter(Stage.TIMING, _result())
    assert not clock.active and clock.left_s() == float("inf")
    assert clock.close(_result(Status.OK, Stage.DONE)).provenance.track_settings == {}


def test_a_stage_that_runs_out_kills_the_worker_and_keeps_the_finished_records() -> None:
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        clock = stage_budget.StageClock(StageBudget(total_s=2.0, build=0.1, correctness=0.1, timing=0.1))
        clock.watch_worker(worker.pid)
        clock.enter(Stage.CORRECTNESS, _result(stage=Stage.CORRECTNESS))
        clock.enter(Stage.TIMING, _result())
        assert worker.wait(timeout=10) == -9  # killed at the timing deadline (0.3 s of the usable 1 s)
        verdict = clock.close(_result(Status.CRASH, Stage.TIMING))  # what the judge made of the dead worker
    finally:
        worker.kill()
        worker.wait()
    assert verdict.status == Status.TIMEOUT and verdict.stage == Stage.TIMING
    assert verdict.error is not None and verdict.error.type == "StageTimeout"
    assert verdict.correct
    report = verdict.provenance.track_settings["stage_budget"]
    assert report["ran_out"]["stage"] == "timing" and report["ran_out"]["deadline_s"] == pytest.approx(0.3)


def test_a_profile_that_runs_out_leaves_the_verdict_standing() -> None:
    clock = stage_budget.StageClock(StageBudget(total_s=2.0, build=0.1, correctness=0.1, timing=0.1, profile=0.1))
    clock.enter(Stage.PROFILE, _result(Status.OK, Stage.PROFILE))
    deadline = time.monotonic() + 5
    while clock.ran_out is None and time.monotonic() < deadline:
        time.sleep(0.02)
    verdict = clock.close(_result(Status.OK, Stage.DONE))
    assert verdict.status == Status.OK and verdict.stage == Stage.DONE and verdict.error is None
    assert verdict.profile is not None and not verdict.profile.available
    assert "the profile stage ran out of its budget" in verdict.profile.reason


def test_stages_entered_after_one_ran_out_change_nothing() -> None:
    clock = stage_budget.StageClock(StageBudget(total_s=2.0, build=0.1, correctness=0.1, timing=0.1))
    clock.enter(Stage.TIMING, _result())
    deadline = time.monotonic() + 5
    while clock.ran_out is None and time.monotonic() < deadline:
        time.sleep(0.02)
    clock.enter(Stage.PROFILE, _result(Status.OK, Stage.PROFILE))  # the judge went on regardless
    verdict = clock.close(_result(Status.OK, Stage.DONE))
    assert verdict.status == Status.TIMEOUT and verdict.stage == Stage.TIMING


def test_shares_are_read_from_text_and_bad_text_is_said() -> None:
    assert stage_budget.parse_shares("") == {}
    assert stage_budget.parse_shares(" build=0.6, timing = .2 ") == {"build": 0.6, "timing": 0.2}
    for text, words in [("bild=0.5", "GROUP=FRACTION"), ("build=x", "not a number"), ("build=0.5,build=0.4", "twice"),
                        ("build=0.9,timing=0.2", "over 1"), ("profile=1.5", "fractions in")]:
        with pytest.raises(ValueError, match=words):
            stage_budget.parse_shares(text)


def test_the_sandbox_s_shares_replace_the_job_s_and_keep_the_rest() -> None:
    budget = stage_budget.for_sandbox(StageBudget(build=0.5), 100.0, now=1.0, shares=(("timing", 0.2),))
    assert (budget.build, budget.correctness, budget.timing, budget.profile) == (0.5, 0.10, 0.2, 0.05)
    with pytest.raises(ValueError, match="over 1"):
        stage_budget.for_sandbox(StageBudget(), 100.0, shares=(("correctness", 0.5),))


def test_the_stage_mark_is_found_last_first_and_only_as_the_clock_writes_it() -> None:
    tail = ("agentforge judge: stage build at 0.1 s\nnoise\nagentforge judge: stage correctness at 2.5 s\n"
            "candidate says: agentforge judge: stage profile at 9.0 s\n")
    assert stage_budget.last_stage_mark(tail) == "the judge's last stage mark on stderr: correctness, from 2.5 s"
    assert stage_budget.last_stage_mark("nothing here") == ""


def test_the_clock_marks_each_stage_group_once_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    clock = stage_budget.StageClock(StageBudget(total_s=60.0))
    for stage in (Stage.TASK, Stage.BUILD, Stage.LOAD, Stage.CORRECTNESS, Stage.INTEGRITY, Stage.TIMING):
        clock.enter(stage, _result())
    clock.close(_result(Status.OK, Stage.DONE))
    lines = capsys.readouterr().err.splitlines()
    marks = [line.split()[3] for line in lines if line.startswith(stage_budget.STAGE_MARK)]
    assert marks == ["build", "correctness", "timing"]
