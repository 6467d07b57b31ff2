"""The harness floor: an empty candidate timed like the others in the same loop, recorded in the
verdict; subjects within 20x of it are overhead-bound, and no speedup headline comes from them."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from agentforge.evaluator import timing
from agentforge.evaluator.hardware.ceilings import measure_ceilings
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessRecord,
    EvalJob,
    EvalResult,
    Measure,
    Stage,
    Status,
    TimingConfig,
    TimingRecord,
    TimingStats,
)
from agentforge.sandbox.worker import launch_worker

EXPLOITS = Path(__file__).resolve().parent.parent / "exploits"
CPU = torch.device("cpu")


def test_the_floor_is_timed_every_repetition_but_does_not_hold_the_stopping_rule() -> None:
    steady = itertools.repeat((5.0, 5.0, torch.zeros(1)))
    noisy = itertools.cycle([(1.0, 1.0, torch.zeros(1)), (90.0, 90.0, torch.zeros(1))])
    subjects = [timing.Subject("candidate", lambda *a: None, timer=lambda b: next(steady)),
                timing.Subject(timing.FLOOR, lambda *a: None, timer=lambda b: next(noisy), floor=True)]
    config = TimingConfig(warmup=0, min_reps=4, max_reps=50, target_rel_stderr=0.01, time_cap_s=60, flush_l2=False)
    run = timing.run_interleaved(subjects, [torch.zeros(1)], lambda rep: None, CPU, config, None)
    assert len(run.subjects["candidate"].samples_us) == 4  # the noisy floor alone would run to 50
    assert len(run.subjects[timing.FLOOR].samples_us) == 4


def test_the_floor_subject_returns_its_preallocated_outputs_and_does_no_work() -> None:
    like = [torch.empty(3, 4, device="meta"), torch.empty(2, dtype=torch.float64, device="meta")]
    subject = timing.floor_subject(like, CPU)
    first, second = subject.fn(torch.ones(3)), subject.fn(torch.ones(3))
    assert [t.shape for t in first] == [torch.Size([3, 4]), torch.Size([2])] and first[1].dtype == torch.float64
    assert all(a is b for a, b in zip(first, second, strict=True))
    assert subject.floor and isinstance(subject.fn, torch.nn.Module)


def test_overhead_bound_names_the_subjects_within_20x_of_the_floor() -> None:
    medians = {"candidate": 150.0, "eager": 250.0, "compile-default": 199.9}
    assert timing.overhead_bound(medians, 10.0) == ("candidate", "compile-default")
    assert timing.overhead_bound(medians, 1.0) == ()
    assert timing.overhead_bound(medians, None) == ()


def stats(us: float) -> TimingStats:
    return TimingStats(median_us=us, mean_us=us, stdev_us=0.0, min_us=us, max_us=us, n=3, rel_stderr=0.0)


def verdict(bound: tuple[str, ...]) -> EvalResult:
    record = TimingRecord(shape="small", method="host-monotonic", candidate=stats(50.0),
                          baselines={"eager": stats(100.0), "compile-default": stats(400.0)},
                          floor=stats(4.0), overhead_bound=bound)
    return EvalResult(task_name="t", candidate_hash="h", backend="cpu", status=Status.OK, stage=Stage.DONE,
                      compile=CompileRecord(ok=True, backend="cpu"),
                      correctness=(CorrectnessRecord(shape="small", seed=1, passed=True),), timing=record)


def test_an_overhead_bound_pair_keeps_its_ratio_but_has_no_headline() -> None:
    bound = verdict(("candidate", "eager"))
    assert bound.speedup == 2.0 and bound.headline_speedup is None
    assert bound.headline_speedup_vs_compile is None  # the candidate is one side of every pair
    assert "overhead-bound" in bound.summary()
    only_eager = verdict(("eager",))
    assert only_eager.headline_speedup is None and only_eager.headline_speedup_vs_compile == 8.0
    clear = verdict(())
    assert clear.headline_speedup == 2.0 and "overhead-bound" not in clear.summary()
    back = EvalResult.from_json(bound.to_json())
    assert back.timing.floor == bound.timing.floor and back.timing.overhead_bound == ("candidate", "eager")
    assert bound.to_dict()["floor_us"] == 4.0 and bound.to_dict()["headline_speedup"] is None


def relu_job(rows: int, cols: int, **changes: Any) -> EvalJob:
    source = (EXPLOITS / "tasks" / "elementwise_relu.py").read_text()
    source = source.replace("B = 64\n", f"B = {rows}\n").replace("D = 1000\n", f"D = {cols}\n")
    return EvalJob(task_name="elementwise_relu", task_source=source, shapes=("default",),
                   candidate_source=(EXPLOITS / "honest" / "relu_cpp.py").read_text(),
                   measure=Measure(baselines=("eager",)), timing=TimingConfig(max_reps=30, time_cap_s=0.5), **changes)


def test_the_pipeline_records_the_floor_and_marks_a_tiny_shape_overhead_bound_not_a_large_one(tmp_path: Path
                                                                                               ) -> None:
    torch.set_num_threads(1)
    measure_ceilings("cpu", cache_dir=tmp_path, copy_bytes=16 * 2**20, gemm_n=256, repeats=3, threads=1)
    tiny = run_pipeline(relu_job(4, 32), launch_worker)
    assert tiny.status == Status.OK, tiny.summary()
    assert tiny.floor_us is not None and tiny.floor_us > 0 and tiny.timing.floor.n == tiny.timing.candidate.n
    assert {"candidate", "eager"} <= set(tiny.timing.overhead_bound) and tiny.headline_speedup is None
    assert any("overhead-bound" in note for note in tiny.timing.notes)
    large = run_pipeline(relu_job(2048, 2048, cache_dir=str(tmp_path)), launch_worker)
    assert large.status == Status.OK, large.summary()
    assert large.timing.overhead_bound == () and large.headline_speedup == large.speedup
    assert large.eager_us > 20 * large.floor_us
    # CPU ceilings measured on the evaluator's one thread give the roofline a floor and a SoL fraction.
    roof = large.roofline
    assert roof.ceilings_source == "measured" and roof.floor_us > 0 and roof.label == "memory-bound"
    assert roof.sol_fraction == pytest.approx(roof.floor_us / large.candidate_us)
