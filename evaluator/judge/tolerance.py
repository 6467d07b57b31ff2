"""The fp32 tolerance, calibrated from eager fp32's own error against fp64, and the precision probe.

One error measure serves both: per output tensor, the largest |x - r| / (|r| + s), with `r` the
float64 reference and `s` the root mean square of r's finite values (the size of an absolute error
near a cancellation: a row sum that lands near zero is judged against the row sums' typical size,
an elementwise op element by element). A candidate whose scaled error is at most `bar` passes
`compare` with atol = bar * s (per output) and rtol = bar.

- **Calibrated bar** (fp32 tasks without a declared TOLERANCE, hardened track): `MULTIPLE` times
  eager fp32's scaled error on the same inputs, never below `FLOOR` (64 fp32 ulps). An op that is
  exact in fp32 (ReLU, a transpose, a max) gets the floor; a long reduction gets room in
  proportion to what fp32 itself loses there.
- **Precision downgrade**: a scaled error above `DOWNGRADE_MULTIPLE` times eager's and above
  `DOWNGRADE_FLOOR` (2^-14, an eighth of fp16's unit roundoff 2^-11), yet below `DOWNGRADE_CEILING`
  (a wrong answer), is what rounding operands or results to fp16, bf16 or TF32 leaves; honest fp32
  kernels measured 3e-8 to 1e-6 here (eager 0 to 1.4e-6).

Imports only torch (it runs in the judge, on bare GPU images too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from agentforge.task import flatten_tensors

MULTIPLE = 16.0
FLOOR = 2.0**-17  # 64 ulps of fp32 (eps 2^-23), relative
DOWNGRADE_MULTIPLE = 64.0
DOWNGRADE_FLOOR = 2.0**-14
DOWNGRADE_CEILING = 2.0**-5  # beyond it an answer is wrong, not rounded (bf16 leaves about 2^-9)


@dataclass(frozen=True)
class Calibrated:
    """The bar for one set of inputs and the scales that turn it into (atol per output, rtol)."""

    bar: float
    eager_error: float
    scales: tuple[float, ...]

    @property
    def atols(self) -> tuple[float, ...]:
        return tuple(self.bar * s for s in self.scales)

    @property
    def rtol(self) -> float:
        return self.bar

    def loosest(self) -> tuple[float, float]:
        """One (atol, rtol) pair no tighter than the bar on any output (for the timing re-checks)."""
        return (max(self.atols, default=self.bar), self.bar)


BLOCK = 1 << 16  # elements per float64 block: its temporaries stay in cache (as `compare`'s finite path)


def _blocks(t: torch.Tensor) -> Any:
    """`t`'s values in float64 on the CPU, block by block (no full-size float64 copy: four passes
    over a 4M-element output in float64 took 136 ms per call on the 2-core machine)."""
    flat = t.detach().reshape(-1)
    for start in range(0, flat.numel(), BLOCK):
        yield flat[start:start + BLOCK].to("cpu", torch.float64)


def output_scales(reference: Any) -> tuple[float, ...]:
    """Per output tensor: the root mean square of the reference's finite values (a tiny positive
    number for an all-zero or empty output, so that only an exact answer passes there)."""
    scales = []
    for r in flatten_tensors(reference):
        total, count = 0.0, 0
        for r64 in _blocks(r):
            finite = torch.isfinite(r64)
            values = r64 if bool(finite.all()) else r64[finite]
            total += float(values.square().sum())
            count += values.numel()
        rms = (total / count) ** 0.5 if count else 0.0
        scales.append(rms if rms > 0 else 1e-30)
    return tuple(scales)


def scaled_error(output: Any, reference: Any, scales: tuple[float, ...] | None = None) -> float:
    """The largest |x - r| / (|r| + s) over every output (finite reference values only); inf when
    the outputs do not line up with the reference's (count, shape) or are not finite where it is."""
    outs, refs = list(flatten_tensors(output)), list(flatten_tensors(reference))
    scales = scales if scales is not None else output_scales(reference)
    if len(outs) != len(refs) or len(scales) != len(refs):
        return float("inf")
    worst = 0.0
    for o, r, s in zip(outs, refs, scales, strict=True):
        if tuple(o.shape) != tuple(r.shape):
            return float("inf")
        for o64, r64 in zip(_blocks(o), _blocks(r), strict=True):
            finite = torch.isfinite(r64)
            if not bool(finite.all()):
                if not finite.any():
                    continue
                o64, r64 = o64[finite], r64[finite]
            err = torch.sub(o64, r64).abs_().div_(r64.abs().add_(s))
            if not bool(torch.isfinite(err).all()):
                return float("inf")
            worst = max(worst, float(err.max()))
    return worst


def calibrate(eager: Any, reference: Any) -> Calibrated:
    """The bar for a candidate on these inputs, from eager fp32's output and the fp64 reference's."""
    scales = output_scales(reference)
    eager_error = scaled_error(eager, reference, scales)
    if eager_error == float("inf"):  # eager itself does not line up with fp64: no basis, the floor only
        eager_error = 0.0
    return Calibrated(bar=max(MULTIPLE * eager_error, FLOOR), eager_error=eager_error, scales=scales)


def downgrade_threshold(eager_error: float) -> float:
    return max(DOWNGRADE_MULTIPLE * eager_error, DOWNGRADE_FLOOR)


def precision_downgrade(candidate_error: float, eager_error: float) -> bool:
    """Whether a candidate's error against fp64 is far above eager fp32's: a lower-precision
    dress-up of an fp32 task (not a wrong answer: those fail every tolerance by far more)."""
    return downgrade_threshold(eager_error) < candidate_error <= DOWNGRADE_CEILING
