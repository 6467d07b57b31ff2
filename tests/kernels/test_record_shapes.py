"""Which shapes a reference-kernel run measures, and how an overhead-bound shape enters its record."""

from __future__ import annotations

import pytest
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessRecord,
    EvalResult,
    Stage,
    Status,
    TimingRecord,
    TimingStats,
)

from agentforge.kernel_library import MeasureOptions, _measured_summary, skipped_shapes, wanted_shapes
from agentforge.task import load_task


def test_a_cpu_kernel_is_measured_on_its_cpu_and_small_shapes_unless_told() -> None:
    softmax = load_task("level1/softmax")
    assert wanted_shapes(softmax, MeasureOptions(), "cpu") == ("cpu", "small")
    assert wanted_shapes(softmax, MeasureOptions(shapes=("odd",)), "cpu") == ("odd",)
    assert wanted_shapes(softmax, MeasureOptions(), "cuda") == tuple(softmax.shapes)
    assert skipped_shapes(softmax, MeasureOptions(max_input_elements=10**6), "cpu") == {
        "cpu": "4,194,304 input elements, over this run's budget of 1,000,000"}


def stats(us: float) -> TimingStats:
    return TimingStats(median_us=us, mean_us=us, stdev_us=0.0, min_us=us, max_us=us, n=3, rel_stderr=0.0)


def verdict(shape: str, candidate_us: float, eager_us: float, bound: tuple[str, ...]) -> EvalResult:
    timing = TimingRecord(shape=shape, method="host-monotonic", candidate=stats(candidate_us),
                          baselines={"eager": stats(eager_us), "compile-default": stats(eager_us * 2)},
                          floor=stats(5.0), overhead_bound=bound)
    return EvalResult(task_name="t", candidate_hash="h", backend="cpu", status=Status.OK, stage=Stage.DONE,
                      compile=CompileRecord(ok=True, backend="cpu"), timing=timing,
                      correctness=(CorrectnessRecord(shape=shape, seed=1, passed=True),))


def test_an_overhead_bound_shape_keeps_its_ratio_but_stays_out_of_the_means() -> None:
    summary = _measured_summary({"cpu": verdict("cpu", 1000.0, 3000.0, ()),
                                 "small": verdict("small", 40.0, 20.0, ("candidate", "eager"))})
    assert summary["speedup"] == pytest.approx(3.0) and summary["speedup_vs_compile"] == pytest.approx(6.0)
    assert summary["overhead_bound_shapes"] == ["small"]
    assert summary["per_shape"]["small"]["speedup"] == 0.5 and summary["per_shape"]["small"]["floor_us"] == 5.0
    only_small = _measured_summary({"small": verdict("small", 40.0, 20.0, ("candidate", "eager"))})
    assert only_small["accepted"] and only_small["speedup"] is None  # nothing to headline


def test_at_least_fifteen_cpu_kernels_each_recorded_on_its_cpu_shape() -> None:
    """Issue #17: 15 or more CPU reference kernels, the level-2 fusions among them, each with a
    record that measured its task's `cpu` shape (eager a few ms on one core) and was accepted."""
    from agentforge.kernel_library import list_kernels

    cpu = [k for k in list_kernels("cpu") if k.backend == "cpu"]
    assert len(cpu) >= 15
    assert len([k for k in cpu if k.task_name.startswith("level2/")]) >= 5
    for kernel in cpu:
        record = kernel.record
        assert record is not None and record["measured"], kernel.task_name
        per_shape = record["summary"]["per_shape"]
        assert "cpu" in per_shape and per_shape["cpu"]["accepted"], kernel.task_name
