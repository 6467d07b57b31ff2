"""How sure a speedup is: a distribution-free interval for the ratio of two interleaved timings.

The timing loop times every subject once per repetition, in a shuffled order, on the same fresh
inputs, so the k-th sample of the baseline and the k-th of the candidate were taken side by side:
their ratio is one paired estimate of the speedup, and noise that hits a whole repetition (a busy
core, a frequency step) cancels in it. The interval is the order-statistic interval of the median of
those ratios (no assumption about their distribution), at 95 % by default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z_95 = 1.959964
# A speedup whose interval spans more than this factor (hi / lo) cannot rank two kernels whose
# speedups differ by less than about half of it: the verdict says so.
RANK_WIDTH = 1.2
MIN_PAIRS = 6


def ratio_interval(baseline_us: Sequence[float], candidate_us: Sequence[float],
                   z: float = Z_95) -> tuple[float, float] | None:
    """(lo, hi) for the median of baseline/candidate over paired repetitions; None with fewer than
    MIN_PAIRS usable pairs."""
    ratios = sorted(b / c for b, c in zip(baseline_us, candidate_us, strict=False) if c > 0 and b > 0)
    n = len(ratios)
    if n < MIN_PAIRS:
        return None
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return ratios[lo], ratios[hi]


def too_wide(interval: tuple[float, float] | None) -> bool:
    return interval is not None and interval[0] > 0 and interval[1] / interval[0] > RANK_WIDTH


def clears(new: tuple[float, float] | None, old: tuple[float, float] | None,
           new_point: float, old_point: float) -> bool:
    """Whether a new speedup beats an old one beyond noise: its interval lies wholly above the old
    one's. Without intervals on both sides, the points decide."""
    if new is None or old is None:
        return new_point > old_point
    return new[0] > old[1]


def describe(interval: tuple[float, float] | None) -> str:
    return "" if interval is None else f"[{interval[0]:.2f}x, {interval[1]:.2f}x]"
