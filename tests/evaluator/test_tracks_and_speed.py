"""The kernelbench track's settings, and the speed rules: below the speed-of-light floor rejects,
over 10x vs eager is an audit mark that leaves the verdict accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from agentforge.evaluator.judge import pipeline
from agentforge.evaluator.judge.pipeline import Context, run_pipeline, track_settings
from agentforge.evaluator.judge.stage_correctness import reference_dtype_for
from agentforge.evaluator.result import (
    EvalJob,
    Measure,
    RooflineRecord,
    Stage,
    Status,
    TimingConfig,
    TimingRecord,
    TimingStats,
)
from agentforge.sandbox.worker import launch_worker

EXPLOITS = Path(__file__).resolve().parent.parent / "exploits"


def relu_job(**changes: object) -> EvalJob:
    return EvalJob(task_name="elementwise_relu", task_source=(EXPLOITS / "tasks" / "elementwise_relu.py").read_text(),
                   candidate_source=(EXPLOITS / "honest" / "relu_cpp.py").read_text(), **changes)


def test_kernelbench_track_settings() -> None:
    timing, correctness = track_settings(relu_job(track="kernelbench", timing=TimingConfig(max_reps=7)))
    # The seeds are secret and fresh per evaluation on every track (None: the judge draws them).
    assert (correctness.trials, correctness.base_seed, correctness.atol, correctness.rtol) == (5, None, 1e-2, 1e-2)
    # KernelBench today: 3 warm-ups plus a discarded first trial, 100 trials, L2 flushed before each, mean
    assert (timing.warmup, timing.min_reps, timing.max_reps) == (4, 100, 100)
    assert timing.statistic == "mean" and timing.flush_l2 and not timing.fresh_inputs
    assert timing.recheck_fraction == 0.0
    assert reference_dtype_for(torch.float32, "kernelbench", None) == torch.float32
    assert reference_dtype_for(torch.float32, "hardened", None) == torch.float64
    assert reference_dtype_for(torch.bfloat16, "hardened", None) == torch.float32


def test_hardened_track_uses_the_job_settings() -> None:
    job = relu_job(timing=TimingConfig(max_reps=7))
    assert track_settings(job) == (job.timing, job.correctness)


def test_kernelbench_track_end_to_end() -> None:
    torch.set_num_threads(1)
    result = run_pipeline(relu_job(track="kernelbench", measure=Measure(baselines=("eager",))), launch_worker)
    assert result.status == Status.OK, result.summary()
    # One published shape, five trials; then the hidden shapes, one trial each (an audit mark if wrong).
    assert [r.shape for r in result.correctness if not r.shape.startswith("hidden-")] == ["default"] * 5
    assert result.timing is not None and result.timing.candidate.n == 100 and result.timing.l2_flushed
    assert result.timing.rechecked_outputs == 0
    assert result.timing.candidate.median_us == pytest.approx(result.timing.candidate.mean_us)
    settings = result.provenance.track_settings
    assert settings["correctness"]["atol"] == 1e-2 and settings["timing"]["statistic"] == "mean"


def stats(us: float) -> TimingStats:
    return TimingStats(median_us=us, mean_us=us, stdev_us=0.0, min_us=us, max_us=us, n=3, rel_stderr=0.0)


def roofline(floor_us: float | None) -> RooflineRecord:
    return RooflineRecord(flops=1e6, bytes=1e6, floor_us=floor_us, arithmetic_intensity=1.0, sol_fraction=None,
                          label="memory-bound", ceilings_source="measured")


def speed_flags(candidate_us: float, eager_us: float, floor_us: float | None) -> Context:
    ctx = Context(relu_job())
    record = TimingRecord(shape="default", method="cuda-events", candidate=stats(candidate_us),
                          baselines={"eager": stats(eager_us)})
    pipeline._speed_flags(ctx, record, roofline(floor_us))
    return ctx


def test_below_the_speed_of_light_floor_rejects() -> None:
    ctx = speed_flags(candidate_us=1.0, eager_us=5.0, floor_us=10.0)
    assert [(f.rule, f.severity) for f in ctx.flags] == [("below_speed_of_light", "reject")]
    assert "below the speed-of-light floor" in ctx.flags[0].evidence
    assert pipeline._rejecting(ctx)


def test_near_the_floor_is_fine_and_no_floor_means_no_flag() -> None:
    assert speed_flags(candidate_us=9.5, eager_us=20.0, floor_us=10.0).flags == []
    assert speed_flags(candidate_us=0.1, eager_us=0.5, floor_us=None).flags == []


def test_over_10x_is_an_audit_mark_not_a_rejection() -> None:
    ctx = speed_flags(candidate_us=10.0, eager_us=150.0, floor_us=1.0)
    assert [(f.rule, f.severity) for f in ctx.flags] == [("speedup_over_10x", "audit")]
    assert not pipeline._rejecting(ctx)
    ctx.stage = Stage.DONE
    result = pipeline._finish(ctx, Status.OK)
    assert result.status == Status.OK and result.flags[0].severity == "audit"
    assert not result.rejecting_flags


def test_at_10x_exactly_there_is_no_mark() -> None:
    assert speed_flags(candidate_us=10.0, eager_us=100.0, floor_us=1.0).flags == []
