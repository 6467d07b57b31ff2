"""Comparing a candidate's outputs with the reference's: one function, used by the correctness
stage and by the re-checks of timed outputs."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentforge.task import flatten_tensors


@dataclass(frozen=True)
class Comparison:
    passed: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    failed_check: str | None = None
    message: str = ""


def expected_dtype(reference: torch.Tensor, task_dtype: torch.dtype) -> torch.dtype:
    """The dtype a task-precision run of the reference produces for this output."""
    if reference.is_floating_point() and reference.dtype in (torch.float64, torch.float32):
        return task_dtype if task_dtype != torch.float64 else reference.dtype
    return reference.dtype


def reference_meta_outputs(model: torch.nn.Module, inputs: list[Any]) -> Any:
    """What the reference returns, on the meta device (shapes and dtypes, no compute); None when
    its forward cannot run on meta (data-dependent ops such as nonzero)."""
    try:
        state = {k: v.to("meta") for k, v in itertools.chain(model.named_parameters(), model.named_buffers())}
        meta_inputs = [x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs]
        with torch.no_grad():
            return torch.func.functional_call(model, state, tuple(meta_inputs))
    except Exception:
        return None


def reference_output_dtypes(model: torch.nn.Module, inputs: list[Any]) -> tuple[torch.dtype, ...] | None:
    """The dtypes the task-precision reference returns, found on the meta device (no compute):
    a bf16 model may return fp32 on purpose (a loss, router probabilities). None when its forward
    cannot run on meta (data-dependent ops such as nonzero); `expected_dtype` then decides."""
    out = reference_meta_outputs(model, inputs)
    return None if out is None else tuple(t.dtype for t in flatten_tensors(out))


def compare(candidate: Any, reference: Any, task_dtype: torch.dtype, atol: float | Sequence[float], rtol: float,
            check_dtype: bool = True, dtypes: tuple[torch.dtype, ...] | None = None) -> Comparison:
    """`reference` was computed in a higher precision; `dtypes` are the output dtypes a
    task-precision run returns (`reference_output_dtypes`), else `expected_dtype` guesses them.
    `atol` is one value for every output, or one per output (a calibrated tolerance's)."""
    cands = list(flatten_tensors(candidate))
    refs = list(flatten_tensors(reference))
    if len(cands) != len(refs):
        return Comparison(False, failed_check="output_count",
                          message=f"{len(cands)} output tensors, the reference has {len(refs)}")
    atols = [float(atol)] * len(refs) if isinstance(atol, int | float) else [float(a) for a in atol]
    if len(atols) != len(refs):
        raise ValueError(f"{len(atols)} absolute tolerances for {len(refs)} outputs")
    worst_abs = worst_rel = 0.0
    for i, (c, r, atol_i) in enumerate(zip(cands, refs, atols, strict=True)):
        if tuple(c.shape) != tuple(r.shape):
            return Comparison(False, failed_check="shape",
                              message=f"output {i} has shape {tuple(c.shape)}, expected {tuple(r.shape)}")
        want = dtypes[i] if dtypes is not None and len(dtypes) == len(refs) else expected_dtype(r, task_dtype)
        if check_dtype and c.dtype != want:
            return Comparison(False, failed_check="dtype", message=f"output {i} is {c.dtype}, expected {want}")
        found = _finite_errors(c.detach().cpu(), r.detach().cpu(), atol_i, rtol, i)
        if found is not None:  # every value finite, the common case
            worst_abs, worst_rel = max(worst_abs, found.max_abs_err or 0.0), max(worst_rel, found.max_rel_err or 0.0)
            if not found.passed:
                return Comparison(False, worst_abs, worst_rel, "allclose", found.message)
            continue
        c64, r64 = c.detach().to("cpu", torch.float64), r.detach().to("cpu", torch.float64)
        ref_finite = torch.isfinite(r64)
        if bool((~torch.isfinite(c64) & ref_finite).any()):
            return Comparison(False, failed_check="nan",
                              message=f"output {i} has NaN/Inf where the reference is finite")
        nonfinite_match = bool(torch.equal(torch.isnan(c64), torch.isnan(r64))) and bool(
            torch.equal(c64[torch.isinf(r64)], r64[torch.isinf(r64)]))
        if not nonfinite_match:
            return Comparison(False, failed_check="nan", message=f"output {i} differs in its NaN/Inf positions")
        if c64.numel() == 0:
            continue
        diff = (c64 - r64).abs()[ref_finite]
        scale = r64.abs()[ref_finite]
        if diff.numel():
            worst_abs = max(worst_abs, float(diff.max()))
            worst_rel = max(worst_rel, float((diff / scale.clamp_min(1e-12)).max()))
            excess = diff - (atol_i + rtol * scale)
            if bool((excess > 0).any()):
                bad = int((excess > 0).sum())
                return Comparison(False, worst_abs, worst_rel, "allclose",
                                  f"output {i}: {bad} of {diff.numel()} elements outside atol={atol_i:.3g} "
                                  f"rtol={rtol:.3g} (max abs err {float(diff.max()):.3g})")
    return Comparison(True, worst_abs, worst_rel)


FINITE_CHUNK = 1 << 16  # elements per block of the finite path: its float64 temporaries stay in cache


def _finite_errors(c: torch.Tensor, r: torch.Tensor, atol: float, rtol: float, index: int) -> Comparison | None:
    """`compare`'s errors and allclose test for one output, in float64, block by block (no
    full-size float64 copies or masks: 0.7 s per 4M-element output before, on one thread); None
    when a value of either side is not finite, for the general path to explain."""
    cf, rf = c.reshape(-1), r.reshape(-1)
    worst_abs = worst_rel = 0.0
    bad = 0
    for start in range(0, cf.numel(), FINITE_CHUNK):
        c64 = cf[start:start + FINITE_CHUNK].to(torch.float64)
        r64 = rf[start:start + FINITE_CHUNK].to(torch.float64)
        if not (bool(torch.isfinite(c64).all()) and bool(torch.isfinite(r64).all())):
            return None
        # In place only on a converted copy: a float64 output's block is a view of the output itself.
        diff = c64.sub_(r64).abs_() if cf.dtype != torch.float64 else torch.sub(c64, r64).abs_()
        scale = r64.abs()
        worst_abs = max(worst_abs, float(diff.max()))
        worst_rel = max(worst_rel, float(torch.div(diff, scale.clamp_min(1e-12)).max()))
        bad += int((diff > scale.mul_(rtol).add_(atol)).sum())  # beyond atol + rtol * |reference|
    if not bad:
        return Comparison(True, worst_abs, worst_rel)
    return Comparison(False, worst_abs, worst_rel, "allclose",
                      f"output {index}: {bad} of {cf.numel()} elements outside atol={atol:.3g} "
                      f"rtol={rtol:.3g} (max abs err {worst_abs:.3g})")


def same_result(first: Any, second: Any) -> bool:
    """Bitwise equality of two runs' outputs (NaNs equal to NaNs)."""
    a, b = list(flatten_tensors(first)), list(flatten_tensors(second))
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and bool(torch.equal(x, y) or torch.allclose(
            x.double(), y.double(), rtol=0, atol=0, equal_nan=True)) for x, y in zip(a, b, strict=True))
