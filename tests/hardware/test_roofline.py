"""Roofline maths on hand-computed cases, and the label rule."""

from __future__ import annotations

import pytest
from agentforge.evaluator.hardware import roofline
from agentforge.evaluator.hardware.ceilings import Ceilings

# 2 TB/s measured, 50 TFLOP/s fp32 measured, 1000 TFLOP/s bf16 from the datasheet.
CEIL = Ceilings("cuda", "test GPU", memory_bandwidth_gbs=2000.0, peak_tflops={"fp32": 50.0, "bf16": 1000.0},
                sources={"bandwidth": "measured", "fp32": "measured", "bf16": "datasheet"})


def test_copy_is_memory_bound() -> None:
    # 4 GB moved at 2 TB/s = 2 ms; no FLOPs.
    assert roofline.floor_us(0, 4e9, CEIL) == pytest.approx(2000.0)
    rec = roofline.analyze(0, 4e9, 2500.0, CEIL)
    assert rec.floor_us == pytest.approx(2000.0) and rec.sol_fraction == pytest.approx(0.8)
    assert rec.label == "memory-bound" and rec.arithmetic_intensity == 0.0
    assert rec.ceilings_source == "measured"


def test_gemm_is_compute_bound() -> None:
    n = 4096
    flops, nbytes = 2 * n**3, 3 * n * n * 2  # bf16 A, B, C once each
    rec = roofline.analyze(flops, nbytes, 200.0, CEIL, dtype="bf16")
    assert rec.floor_us == pytest.approx(137.438953472)  # 1.374e11 / 1e15 s
    assert rec.sol_fraction == pytest.approx(137.438953472 / 200.0)
    assert rec.arithmetic_intensity == pytest.approx(n / 3)
    assert rec.label == "compute-bound"
    assert rec.ceilings_source == "measured+datasheet"


def test_small_problem_far_from_its_floor_is_latency_bound() -> None:
    # floor 0.5 µs (1 MB at 2 TB/s); 8 µs measured = 6 % of it.
    assert roofline.analyze(1e6, 1e6, 8.0, CEIL).label == "latency-bound"
    # the same problem at 25 % of its floor is judged by its intensity
    assert roofline.analyze(1e6, 1e6, 2.0, CEIL).label == "memory-bound"
    # without a measured time there is nothing to call latency-bound
    assert roofline.analyze(1e6, 1e6, None, CEIL).label == "memory-bound"


def test_large_slow_problem_keeps_its_bound() -> None:
    rec = roofline.analyze(0, 4e9, 100_000.0, CEIL)
    assert rec.sol_fraction == pytest.approx(0.02) and rec.label == "memory-bound"


def test_faster_than_the_floor_is_reported_not_clipped() -> None:
    assert roofline.analyze(0, 4e9, 1000.0, CEIL).sol_fraction == pytest.approx(2.0)


def test_missing_peak_keeps_a_lower_bound_and_no_guess() -> None:
    # int8 has no peak: the floor is the byte term alone, and the label is unknown.
    assert roofline.floor_us(1e12, 1e6, CEIL, dtype="int8") == pytest.approx(0.5)
    assert roofline.analyze(1e12, 1e6, 1.0, CEIL, dtype="int8").label == "unknown"
    # no byte count: the FLOP term alone
    assert roofline.floor_us(5e9, None, CEIL) == pytest.approx(100.0)


def test_no_ceilings_no_floor() -> None:
    rec = roofline.analyze(1e9, 1e9, 10.0, Ceilings("cuda", "no CUDA device"))
    assert rec.floor_us is None and rec.sol_fraction is None
    assert rec.label == "unknown" and rec.ceilings_source == "unknown"
    assert roofline.floor_us(None, None, CEIL) is None
    assert roofline.floor_us(0, 0, CEIL) is None


def test_ridge_point() -> None:
    assert roofline.ridge_point(CEIL, "bf16") == pytest.approx(500.0)
    assert roofline.ridge_point(CEIL, "fp32") == pytest.approx(25.0)
    assert roofline.ridge_point(Ceilings("cpu", "x")) is None


def test_io_bytes() -> None:
    import torch

    tensors = [torch.empty(10, dtype=torch.float32), torch.empty(3, 4, dtype=torch.bfloat16), 7, None]
    assert roofline.io_bytes(tensors) == 40 + 24
