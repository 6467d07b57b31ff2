"""Metrics against hand-computed tables."""

from __future__ import annotations

import math

import pytest

from agentforge.leaderboard.metrics import (
    SPEEDUP_CLIP,
    RunCost,
    SampleOutcome,
    best_per_task,
    clip,
    fast_p,
    geomean,
    overhead_flags,
    summarize,
)

SUITE = ["a", "b", "c", "d", "e"]  # "e" has no sample: missing counts as not correct


def S(task: str, speedup: float | None, accepted: bool = True, **kw) -> SampleOutcome:
    return SampleOutcome(task=task, accepted=accepted, speedup=speedup, **kw)


SAMPLES = [
    S("a", 0.5),
    S("b", 1.1),
    S("c", 1.6, speedup_vs_compile=0.8, sol_fraction=0.4),
    S("d", None, accepted=False, flagged=True, status="integrity_flag"),
]


@pytest.mark.parametrize(("p", "expected"), [
    (0.0, 3 / 5),  # a, b, c correct; d rejected; e missing
    (1.0, 2 / 5),  # b, c
    (1.2, 1 / 5),  # c
    (1.5, 1 / 5),  # c
    (2.0, 0 / 5),
])
def test_fast_p_over_all_tasks(p: float, expected: float) -> None:
    assert fast_p(best_per_task(SAMPLES), SUITE, p) == pytest.approx(expected)


def test_fast_p_is_strict() -> None:
    assert fast_p(best_per_task([S("a", 1.0)]), ["a"], 1.0) == 0.0


def test_accepted_without_timing_counts_for_fast_0_only() -> None:
    per_task = best_per_task([S("a", None)])
    assert fast_p(per_task, ["a"], 0.0) == 1.0 and fast_p(per_task, ["a"], 1.0) == 0.0


def test_summary_table() -> None:
    m = summarize(SAMPLES, SUITE)
    assert (m.n_tasks, m.n_evaluated, m.n_samples) == (5, 4, 4)
    assert m.correctness_rate == pytest.approx(0.6)
    assert m.geomean_speedup == pytest.approx((0.5 * 1.1 * 1.6) ** (1 / 3))
    assert m.median_speedup == pytest.approx(1.1)
    # over all five tasks, d (rejected) and e (missing) count as 1.0
    assert m.geomean_speedup_all == pytest.approx((0.5 * 1.1 * 1.6) ** (1 / 5))
    assert m.geomean_speedup_vs_compile == pytest.approx(0.8)
    assert m.mean_sol_fraction == pytest.approx(0.4)
    assert m.flag_rate == pytest.approx(1 / 4)
    assert m.usd_per_task is None


def test_clipping_bounds_one_outlier() -> None:
    assert SPEEDUP_CLIP == (0.01, 100.0)
    assert clip(1e6) == 100.0 and clip(1e-9) == 0.01 and clip(3.0) == 3.0
    m = summarize([S("a", 1e6), S("b", 1.0)], ["a", "b"])
    assert m.geomean_speedup == pytest.approx(math.sqrt(100.0))
    assert m.median_speedup == pytest.approx((100.0 + 1.0) / 2)
    assert m.fast_p[2.0] == pytest.approx(0.5)  # thresholds use the measured speedup


def test_best_sample_per_task() -> None:
    samples = [
        S("a", None, accepted=False, sample=0),
        S("a", 1.3, sample=1),
        S("a", 2.5, sample=2),
        S("b", None, accepted=False, sample=3, status="mismatch"),
        S("b", None, accepted=False, sample=1, status="compile_error"),
    ]
    best = best_per_task(samples)
    assert best["a"].speedup == 2.5
    assert best["b"].sample == 1  # none accepted: the first sample stands
    m = summarize(samples, ["a", "b"])
    assert m.flag_rate == 0.0 and m.n_samples == 5 and m.fast_p[2.0] == 0.5


def test_costs_per_task() -> None:
    runs = [RunCost("a", 0.2, 1000, 3.0), RunCost("b", 0.4, 3000, 5.0)]
    m = summarize([S("a", 1.0)], ["a", "b"], runs)
    assert (m.usd_per_task, m.tokens_per_task, m.minutes_per_task) == pytest.approx((0.3, 2000, 4.0))


def test_samples_outside_the_suite_are_ignored() -> None:
    m = summarize([S("zzz", 5.0), S("a", 2.0)], ["a"])
    assert m.n_samples == 1 and m.geomean_speedup == pytest.approx(2.0)


def test_empty_inputs() -> None:
    m = summarize([], ["a"])
    assert m.correctness_rate == 0.0 and m.geomean_speedup is None and m.flag_rate is None
    assert m.geomean_speedup_all == pytest.approx(1.0)
    assert geomean([]) is None
    with pytest.raises(ValueError):
        geomean([0.0])


def test_as_row_names_fast_p() -> None:
    row = summarize(SAMPLES, SUITE).as_row()
    assert set(row) >= {"fast_0", "fast_1", "fast_1.2", "fast_1.5", "fast_2", "geomean", "flag_rate"}


def test_overhead_bound_pairs_give_no_headline() -> None:
    samples = [S("a", 3.0, overhead_bound=True, speedup_vs_compile=2.0), S("b", 1.5, speedup_vs_compile=0.5,
                                                                             overhead_bound_vs_compile=True)]
    m = summarize(samples, ["a", "b"])
    assert m.correctness_rate == 1.0 and m.n_overhead_bound == 1
    assert m.geomean_speedup == pytest.approx(1.5) and m.fast_p[1.0] == pytest.approx(0.5)
    assert m.geomean_speedup_all == pytest.approx(1.5 ** 0.5)  # the bound task counts as 1.0
    assert m.geomean_speedup_vs_compile == pytest.approx(2.0)  # a's compile pair is not bound
    # A real measurement beats a larger, overhead-bound one of the same task.
    best = best_per_task([S("a", 9.0, overhead_bound=True, sample=0), S("a", 1.2, sample=1)])
    assert best["a"].sample == 1


def test_overhead_flags_read_headlines_and_older_timing_lists() -> None:
    assert overhead_flags('{"speedup": 2.0, "headline_speedup": null, "speedup_vs_compile": 1.0, '
                          '"headline_speedup_vs_compile": 1.0}') == {
        "overhead_bound": True, "overhead_bound_vs_compile": False}
    assert overhead_flags('{"speedup": 2.0, "timing": {"overhead_bound": ["compile-default"]}}') == {
        "overhead_bound": False, "overhead_bound_vs_compile": True}
    assert overhead_flags("not json") == {"overhead_bound": False, "overhead_bound_vs_compile": False}
    assert overhead_flags('{"speedup": null, "headline_speedup": null}')["overhead_bound"] is False
