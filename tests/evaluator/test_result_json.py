"""EvalJob and EvalResult round-trip through JSON, the whole tree, strictly."""

from __future__ import annotations

import dataclasses
import json

import pytest
from agentforge.evaluator.result import (
    CompileRecord,
    CorrectnessConfig,
    CorrectnessRecord,
    DeviceInfo,
    ErrorRecord,
    EvalJob,
    EvalProvenance,
    EvalResult,
    Flag,
    KernelResources,
    Measure,
    ProfileRecord,
    RooflineRecord,
    Stage,
    Status,
    TimingConfig,
    TimingRecord,
    TimingStats,
)


def stats(median: float) -> TimingStats:
    return TimingStats(median_us=median, mean_us=median * 1.1, stdev_us=0.5, min_us=median * 0.9,
                       max_us=median * 1.5, n=3, rel_stderr=0.01, samples_us=(median, median * 0.9, median * 1.5))


def full_result() -> EvalResult:
    return EvalResult(
        task_name="level1/relu", candidate_hash="abc123", backend="cuda", status=Status.OK, stage=Stage.DONE,
        compile=CompileRecord(ok=True, backend="cuda", seconds=1.5, cached=True, path="load_inline", arch="sm_90a",
                              log_tail="ptxas info", resources=(KernelResources("relu_kernel", registers=16,
                                                                                shared_bytes=0, spill_store_bytes=0),),
                              sass_histogram={"FMUL": 2, "LDG.E": 1}),
        correctness=(CorrectnessRecord("default", 43, True, 0.0, 0.0),
                     CorrectnessRecord("odd", 1043, True, 1e-7, 2e-7, None, "")),
        flags=(Flag("speedup_over_10x", "12.0x vs eager", "audit"),),
        timing=TimingRecord(shape="default", method="cuda-events", candidate=stats(10.0),
                            baselines={"eager": stats(120.0), "compile-default": stats(60.0)}, l2_flushed=True,
                            rechecked_outputs=3, notes=("compile mode max-autotune failed",)),
        roofline=RooflineRecord(flops=1e6, bytes=8e6, floor_us=2.7, arithmetic_intensity=0.125, sol_fraction=0.27,
                                label="memory-bound", ceilings_source="measured"),
        profile=ProfileRecord(available=True, kernels=({"name": "relu_kernel", "dram__bytes.sum": 8e6},),
                              totals={"dram__bytes.sum": 8e6}),
        error=None,
        provenance=EvalProvenance(track="hardened", track_settings={"timing": {"max_reps": 200}},
                                  versions={"torch": "2.13"}, device=DeviceInfo("cuda", "H100", "570.1", "9.0"),
                                  host="node1", started_at="2026-01-01T00:00:00+00:00", duration_s=3.25,
                                  sandbox="process+bwrap"),
        candidate_meta={"provenance": {"model": "m", "round": 2}},
    )


def test_full_result_round_trips() -> None:
    result = full_result()
    back = EvalResult.from_json(result.to_json())
    assert back == result
    assert back.speedup == pytest.approx(12.0) and back.speedup_vs_compile == pytest.approx(6.0)
    assert back.accepted and back.compile_us == 60.0


def test_derived_fields_are_written_and_ignored_on_read() -> None:
    data = json.loads(full_result().to_json())
    assert data["accepted"] is True and data["speedup"] == pytest.approx(12.0)
    assert data["status"] == "ok" and data["timing"]["candidate"]["median_us"] == 10.0


def test_error_result_round_trips() -> None:
    result = EvalResult(task_name="t", candidate_hash="h", backend="cpu", status=Status.CRASH, stage=Stage.SANDBOX,
                        error=ErrorRecord("Crash", "killed", signal=9, exit_code=-9, stderr_tail="oops"))
    back = EvalResult.from_json(result.to_json())
    assert back == result and not back.accepted and back.speedup is None


def test_unknown_keys_are_rejected() -> None:
    data = json.loads(full_result().to_json())
    data["compile"]["surprise"] = 1
    with pytest.raises(ValueError, match="surprise"):
        EvalResult.from_json(json.dumps(data))


def test_nan_is_refused_when_writing() -> None:
    result = EvalResult(task_name="t", candidate_hash="h", backend="cpu", status=Status.MISMATCH,
                        stage=Stage.CORRECTNESS, correctness=(CorrectnessRecord("default", 1, False, float("nan")),))
    with pytest.raises(ValueError):
        result.to_json()


def test_job_round_trips() -> None:
    job = EvalJob(task_name="t", task_source="src", candidate_source="cand", backend="cuda", device="cuda:0",
                  track="kernelbench", shapes=("default", "odd"), measure=Measure(timing=False, baselines=("eager",)),
                  timing=TimingConfig(max_reps=20), correctness=CorrectnessConfig(trials=2, atol=1e-3),
                  candidate_meta={"a": [1, 2]})
    assert EvalJob.from_json(job.to_json()) == job


def test_a_rejecting_flag_unaccepts() -> None:
    result = full_result()
    flagged = dataclasses.replace(result, flags=(Flag("torch_fallback", "aten::relu x5"),))
    assert not flagged.accepted and flagged.speedup is None
