"""The speedup's interval: paired per-repetition ratios, their median's order-statistic interval."""

from __future__ import annotations

import random

from agentforge.evaluator.speedup_interval import MIN_PAIRS, clears, ratio_interval, too_wide


def test_the_interval_holds_the_true_ratio_and_narrows_with_more_repetitions() -> None:
    rng = random.Random(7)
    widths = []
    for n in (20, 200):
        base = [100.0 * rng.lognormvariate(0, 0.05) for _ in range(n)]
        cand = [50.0 * rng.lognormvariate(0, 0.05) for _ in range(n)]
        lo, hi = ratio_interval(base, cand)
        assert lo < 2.0 < hi
        widths.append(hi / lo)
    assert widths[1] < widths[0]


def test_noise_shared_by_a_repetition_cancels_in_the_paired_ratio() -> None:
    rng = random.Random(3)
    load = [rng.choice([1.0, 3.0, 10.0]) for _ in range(40)]  # a busy core hits both subjects alike
    lo, hi = ratio_interval([100.0 * x for x in load], [40.0 * x for x in load])
    assert (lo, hi) == (2.5, 2.5)
    assert not too_wide((lo, hi))


def test_too_few_pairs_give_no_interval_and_a_noisy_one_is_too_wide_to_rank() -> None:
    assert ratio_interval([1.0] * (MIN_PAIRS - 1), [1.0] * (MIN_PAIRS - 1)) is None
    rng = random.Random(1)
    base = [100.0 * rng.uniform(0.3, 3.0) for _ in range(30)]
    cand = [100.0 * rng.uniform(0.3, 3.0) for _ in range(30)]
    assert too_wide(ratio_interval(base, cand))


def test_a_new_best_must_clear_the_old_interval() -> None:
    assert clears((2.1, 2.3), (1.8, 2.0), 2.2, 1.9)
    assert not clears((1.9, 2.3), (1.8, 2.0), 2.1, 1.9)  # overlapping: not better beyond noise
    assert clears(None, (1.8, 2.0), 2.1, 1.9)  # no interval on one side: the points decide
