"""compare(): tolerances relative to the reference's magnitude, NaN/Inf, dtype, shape, output count."""

from __future__ import annotations

import pytest
import torch
from agentforge.evaluator.judge.compare import compare, expected_dtype, reference_output_dtypes, same_result


def ref64(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def cand32(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def test_within_atol_plus_rtol_passes_and_reports_errors() -> None:
    result = compare(cand32(1.0001, -2.0), ref64(1.0, -2.0), torch.float32, atol=1e-4, rtol=1e-4)
    assert result.passed
    assert result.max_abs_err == pytest.approx(1e-4, rel=1e-2)
    assert result.max_rel_err == pytest.approx(1e-4, rel=1e-2)


def test_tolerance_scales_with_the_reference_magnitude() -> None:
    big = compare(cand32(1000.05), ref64(1000.0), torch.float32, atol=1e-4, rtol=1e-4)
    small = compare(cand32(0.05), ref64(0.0), torch.float32, atol=1e-4, rtol=1e-4)
    assert big.passed  # 0.05 <= 1e-4 + 1e-4 * 1000
    assert not small.passed and small.failed_check == "allclose"
    assert "1 of 1 elements" in small.message


def test_one_bad_element_fails() -> None:
    cand = torch.zeros(1000, dtype=torch.float32)
    cand[17] = 1.0
    result = compare(cand, torch.zeros(1000, dtype=torch.float64), torch.float32, atol=1e-4, rtol=1e-4)
    assert not result.passed and result.failed_check == "allclose" and result.max_abs_err == 1.0


def test_nan_where_the_reference_is_finite_fails() -> None:
    result = compare(cand32(float("nan"), 1.0), ref64(0.0, 1.0), torch.float32, atol=1e-2, rtol=1e-2)
    assert not result.passed and result.failed_check == "nan"


def test_matching_nan_and_inf_pass_but_a_wrong_inf_sign_fails() -> None:
    inf, nan = float("inf"), float("nan")
    assert compare(cand32(nan, inf, 1.0), ref64(nan, inf, 1.0), torch.float32, atol=1e-4, rtol=1e-4).passed
    flipped = compare(cand32(nan, -inf, 1.0), ref64(nan, inf, 1.0), torch.float32, atol=1e-4, rtol=1e-4)
    assert not flipped.passed and flipped.failed_check == "nan"
    missing_nan = compare(cand32(0.0, 1.0), ref64(nan, 1.0), torch.float32, atol=1e-4, rtol=1e-4)
    assert not missing_nan.passed and missing_nan.failed_check == "nan"


def test_dtype_must_be_the_task_dtype() -> None:
    result = compare(ref64(1.0), ref64(1.0), torch.float32, atol=1e-4, rtol=1e-4)
    assert not result.passed and result.failed_check == "dtype"
    half = compare(torch.tensor([1.0], dtype=torch.float16), ref64(1.0), torch.float32, atol=1, rtol=1)
    assert not half.passed and half.failed_check == "dtype"
    assert compare(ref64(1.0), ref64(1.0), torch.float32, atol=1e-4, rtol=1e-4, check_dtype=False).passed


def test_expected_dtype() -> None:
    assert expected_dtype(ref64(1.0), torch.float32) == torch.float32
    assert expected_dtype(ref64(1.0), torch.float64) == torch.float64
    assert expected_dtype(torch.tensor([1]), torch.float32) == torch.int64


def test_shape_mismatch_fails_even_when_broadcastable() -> None:
    result = compare(torch.zeros(4, 1), torch.zeros(4, 4, dtype=torch.float64), torch.float32, atol=1, rtol=1)
    assert not result.passed and result.failed_check == "shape"


def test_output_count_must_match() -> None:
    result = compare((cand32(1.0), cand32(2.0)), ref64(1.0), torch.float32, atol=1e-4, rtol=1e-4)
    assert not result.passed and result.failed_check == "output_count"
    none = compare([], ref64(1.0), torch.float32, atol=1e-4, rtol=1e-4)
    assert not none.passed and none.failed_check == "output_count"


def test_tuples_compare_elementwise() -> None:
    ok = compare((cand32(1.0), cand32(2.0)), (ref64(1.0), ref64(2.0)), torch.float32, atol=1e-4, rtol=1e-4)
    bad = compare((cand32(1.0), cand32(2.5)), (ref64(1.0), ref64(2.0)), torch.float32, atol=1e-4, rtol=1e-4)
    assert ok.passed
    assert not bad.passed and "output 1" in bad.message


def test_empty_outputs_pass() -> None:
    assert compare(torch.zeros(0), torch.zeros(0, dtype=torch.float64), torch.float32, atol=0, rtol=0).passed


def test_same_result_is_bitwise() -> None:
    a = cand32(1.0, float("nan"))
    assert same_result(a, a.clone())
    assert not same_result(a, cand32(1.0 + 1e-7, float("nan")))
    assert not same_result((a,), (a, a))


class _Loss(torch.nn.Module):
    """A bf16 model whose output is fp32 on purpose, as a loss or router probabilities are."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(8, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = x * self.weight
        return y, y.float().pow(2).mean()


def test_output_dtypes_come_from_the_task_precision_reference_on_meta():
    model = _Loss()
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    dtypes = reference_output_dtypes(model, [x])
    assert dtypes == (torch.bfloat16, torch.float32)
    assert model.weight.device.type == "cpu"  # the model itself is untouched
    y, loss = model(x)
    hi = (y.double(), loss.double())  # what the correctness stage compares against
    assert compare((y, loss), hi, torch.bfloat16, atol=1e-2, rtol=1e-2, dtypes=dtypes).passed
    wrong = compare((y, loss.bfloat16()), hi, torch.bfloat16, atol=1e-2, rtol=1e-2, dtypes=dtypes)
    assert not wrong.passed and wrong.failed_check == "dtype"


def test_output_dtypes_fall_back_when_the_reference_cannot_run_on_meta():
    class Select(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[torch.nonzero(x > 0, as_tuple=True)]

    assert reference_output_dtypes(Select(), [torch.randn(5)]) is None


def test_one_absolute_tolerance_per_output() -> None:
    """A calibrated tolerance gives each output its own atol (bar x that output's scale)."""
    cands = (cand32(0.0 + 5e-4), cand32(100.0 + 5e-4))
    refs = (ref64(0.0), ref64(100.0))
    assert compare(cands, refs, torch.float32, atol=(1e-3, 0.0), rtol=1e-5).passed
    failed = compare(cands, refs, torch.float32, atol=(1e-4, 1e-3), rtol=0.0)
    assert not failed.passed and failed.message.startswith("output 0")
    with pytest.raises(ValueError, match="2 absolute tolerances for 1 outputs"):
        compare(cand32(1.0), ref64(1.0), torch.float32, atol=(1e-3, 1e-3), rtol=0.0)


def test_the_blockwise_finite_path_agrees_with_the_general_one_and_leaves_outputs_alone() -> None:
    """All-finite outputs are compared block by block in float64; a wrong element in a later block
    is found and counted, a float64 output is not changed by being compared, and a NaN still goes
    to the general path's explanation."""
    from agentforge.evaluator.judge.compare import FINITE_CHUNK

    ref = torch.randn(3 * FINITE_CHUNK + 7, dtype=torch.float64)
    out = ref.float()
    out[2 * FINITE_CHUNK + 3] += 1.0
    result = compare(out, ref, torch.float32, atol=1e-5, rtol=1e-5)
    assert not result.passed and result.failed_check == "allclose" and "1 of" in result.message
    assert result.max_abs_err == pytest.approx(1.0, rel=1e-5)
    same = ref.clone()
    assert compare(same, ref, torch.float64, atol=0.0, rtol=0.0).passed and torch.equal(same, ref)
    out[5] = float("nan")
    assert compare(out, ref, torch.float32, atol=1e-5, rtol=1e-5).failed_check == "nan"
