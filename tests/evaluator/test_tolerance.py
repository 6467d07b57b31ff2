"""The calibrated fp32 tolerance and the precision-downgrade probe (`evaluator/judge/tolerance.py`), and the
kernelbench track keeping its published tolerance while marking a downgrade."""

from __future__ import annotations

from pathlib import Path

import torch
from agentforge.evaluator.api import make_job
from agentforge.evaluator.judge import tolerance
from agentforge.evaluator.judge.compare import compare
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.judge.stage_correctness import precision_policy
from agentforge.evaluator.result import Measure, Status
from agentforge.sandbox.worker import launch_worker

from agentforge.candidate import Candidate
from agentforge.task import Task

TASKS = Path(__file__).resolve().parents[1] / "exploits" / "tasks"


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def keep_mantissa_bits(x: torch.Tensor, bits: int) -> torch.Tensor:
    """fp32 values rounded to nearest with `bits` of the 23 mantissa bits kept."""
    drop = 23 - bits
    raw = x.contiguous().view(torch.int32)
    return ((raw + (1 << (drop - 1))) & ~((1 << drop) - 1)).view(torch.float32)


def checks(candidate: torch.Tensor, expected: torch.Tensor, calibrated: tolerance.Calibrated) -> bool:
    return compare(candidate, expected, torch.float32, atol=calibrated.atols, rtol=calibrated.rtol).passed


def test_an_exact_op_gets_the_floor_and_13_mantissa_bits_fail_it() -> None:
    x = torch.randn(256, 512, generator=gen())
    expected = torch.relu(x.double())
    calibrated = tolerance.calibrate(torch.relu(x), expected)
    assert calibrated.eager_error == 0.0 and calibrated.bar == tolerance.FLOOR
    assert checks(torch.relu(x), expected, calibrated)
    rounded = keep_mantissa_bits(torch.relu(x), 13)
    assert not checks(rounded, expected, calibrated)
    # The fixed fp32 tolerance this replaces let the same rounding through.
    assert compare(rounded, expected, torch.float32, atol=1e-4, rtol=1e-4).passed
    # Below the downgrade threshold: a mismatch, not called fp16/bf16.
    assert not tolerance.precision_downgrade(tolerance.scaled_error(rounded, expected), calibrated.eager_error)


def test_a_long_reduction_gets_room_from_eager_and_a_sequential_fp32_sum_passes() -> None:
    x = torch.randn(64, 1 << 16, generator=gen(1))
    expected = x.double().sum(-1)
    calibrated = tolerance.calibrate(x.sum(-1), expected)
    assert calibrated.bar == max(tolerance.MULTIPLE * calibrated.eager_error, tolerance.FLOOR)
    assert calibrated.eager_error > 0
    # A blocked fp32 sum in another order (64 partial sums of 1024), as an honest kernel might do it.
    blocked = x.view(64, 64, 1024).sum(-1).sum(-1)
    assert checks(blocked, expected, calibrated)
    assert not tolerance.precision_downgrade(tolerance.scaled_error(blocked, expected), calibrated.eager_error)


def test_fp16_and_bf16_dress_ups_of_an_fp32_gemm_are_downgrades_and_fp32_in_another_order_is_not() -> None:
    a, b = torch.randn(64, 80, generator=gen(2)), torch.randn(80, 96, generator=gen(3))
    expected = a.double() @ b.double()
    calibrated = tolerance.calibrate(a @ b, expected)
    split_k = a[:, :40] @ b[:40] + a[:, 40:] @ b[40:]
    assert checks(split_k, expected, calibrated)
    assert not tolerance.precision_downgrade(tolerance.scaled_error(split_k, expected), calibrated.eager_error)
    for low in (torch.float16, torch.bfloat16):
        dressed = (a.to(low).float() @ b.to(low).float())
        error = tolerance.scaled_error(dressed, expected)
        assert not checks(dressed, expected, calibrated)
        assert tolerance.precision_downgrade(error, calibrated.eager_error), (low, error)
        # ... yet within KernelBench's published 1e-2 (fp16 at least), which is why its track marks it.
        if low == torch.float16:
            assert compare(dressed, expected, torch.float32, atol=1e-2, rtol=1e-2).passed


def test_a_wrong_answer_is_not_called_a_downgrade() -> None:
    x = torch.randn(32, 64, generator=gen(4))
    expected = torch.relu(x.double())
    assert not tolerance.precision_downgrade(tolerance.scaled_error(torch.zeros_like(x), expected), 0.0)
    assert tolerance.scaled_error(torch.zeros(3), expected) == float("inf")


def test_each_output_is_scaled_by_its_own_size() -> None:
    """add_rms_norm-like: two outputs a hundredfold apart; each gets atol = bar x its own rms."""
    small, large = torch.randn(100, generator=gen(5)) * 0.01, torch.randn(100, generator=gen(6)) * 100
    expected = (small.double(), large.double())
    calibrated = tolerance.calibrate((small, large), expected)
    assert calibrated.atols[1] / calibrated.atols[0] > 1000
    nudged = (small + 0.5 * calibrated.atols[1], large)  # fine for the large output, not the small one
    assert not compare(nudged, expected, torch.float32, atol=calibrated.atols, rtol=calibrated.rtol).passed


def test_which_rules_apply() -> None:
    fp32 = Task("small_gemm", (TASKS / "small_gemm.py").read_text())
    declared = Task("declared", "import torch\nTOLERANCE = 1e-3\nclass Model(torch.nn.Module):\n"
                    "    def forward(self, x): return x.sum(-1)\n"
                    "def get_inputs(): return [torch.randn(4, 8)]\ndef get_init_inputs(): return []\n")
    bf16 = Task("bf16", "import torch\nDTYPE = 'bfloat16'\nclass Model(torch.nn.Module):\n"
                "    def forward(self, x): return x * 2\n"
                "def get_inputs(): return [torch.randn(4, 8)]\ndef get_init_inputs(): return []\n")
    assert precision_policy(fp32, "hardened", None, None) == {
        "calibrate": True, "precision_probe": True, "probe_severity": "reject", "hidden_shapes": True,
        "hidden_severity": "reject"}
    assert precision_policy(fp32, "hardened", 1e-3, None)["calibrate"] is False  # the job's own tolerance
    assert precision_policy(declared, "hardened", None, None)["calibrate"] is False  # the task's own
    assert precision_policy(declared, "hardened", None, None)["precision_probe"] is True
    assert precision_policy(bf16, "hardened", None, None)["precision_probe"] is False
    kernelbench = precision_policy(fp32, "kernelbench", 1e-2, 1e-2)
    assert kernelbench == {"calibrate": False, "precision_probe": True, "probe_severity": "audit",
                           "hidden_shapes": True, "hidden_severity": "audit"}


FP16_OUTPUT_GEMM = r'''
import ctypes

import torch
from agentforge.evaluator.native import load_cpp
from torch import nn

SOURCE = r"""
extern "C" void gemm(const float* a, const float* b, float* c, long M, long N, long K) {
    for (long i = 0; i < M * N; ++i) c[i] = 0.f;
    for (long i = 0; i < M; ++i)
        for (long k = 0; k < K; ++k)
            for (long j = 0; j < N; ++j) c[i * N + j] += a[i * K + k] * b[k * N + j];
    for (long i = 0; i < M * N; ++i) c[i] = (float)(_Float16)c[i];  // an fp16 output buffer
}
"""
_lib = load_cpp("gemm_fp16_output_test", SOURCE, openmp=False)
_lib.gemm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 3


class ModelNew(nn.Module):
    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
        _lib.gemm(a.data_ptr(), b.data_ptr(), c.data_ptr(), a.shape[0], b.shape[1], a.shape[1])
        return c
'''


def test_kernelbench_track_keeps_its_verdict_and_marks_the_downgrade(tmp_path, monkeypatch) -> None:
    """An fp32 GEMM whose result goes through an fp16 buffer (relative error at most 2^-11, always
    within KernelBench's published 1e-2): the track's verdict stays what KernelBench's would be
    (accepted), and the probe marks it for audit."""
    monkeypatch.chdir(tmp_path)
    task = Task("small_gemm", (TASKS / "small_gemm.py").read_text())
    job = make_job(task, Candidate(FP16_OUTPUT_GEMM, backend="cpu"), device="cpu", track="kernelbench",
                   measure=Measure(timing=False))
    result = run_pipeline(job, launch_worker)
    assert result.status == Status.OK and result.accepted, result.summary()
    marks = [f for f in result.flags if f.rule == "precision_downgrade"]
    assert marks and all(f.severity == "audit" for f in marks), result.flags
    notes = result.provenance.track_settings["correctness"]
    assert notes["precision"]["default"]["candidate_error"] > 64 * notes["precision"]["default"]["eager_fp32_error"]
    # Hidden shapes run there too (a wrong one would be an audit mark); this GEMM is right on them.
    assert notes["hidden_shapes"]["ran"] >= 1 and not notes["hidden_shapes"]["failed"], notes["hidden_shapes"]
