"""Group z-scores with clipping, zero-variance groups, discounted multi-turn returns."""

from __future__ import annotations

import math

import pytest
from agentforge.rl.grouping import discounted_returns, group_zscore, zscore


def test_zscore_is_mean_zero_unit_std():
    scores = zscore([1.0, 2.0, 3.0])
    assert scores == pytest.approx([-math.sqrt(1.5), 0.0, math.sqrt(1.5)])


def test_zscore_clips_at_1_5_by_default():
    # One outlier among nine equals: its z is 3, clipped to 1.5; the others are -1/3.
    scores = zscore([0.0] * 9 + [10.0])
    assert scores[-1] == 1.5
    assert scores[0] == pytest.approx(-1 / 3)
    assert zscore([0.0] * 9 + [10.0], clip=None)[-1] == pytest.approx(3.0)


def test_zero_variance_group_gives_zero_advantages():
    assert zscore([-1.0, -1.0, -1.0, -1.0]) == [0.0, 0.0, 0.0, 0.0]
    assert zscore([]) == []


def test_group_zscore_normalises_each_prompt_alone():
    rewards = [1.0, 3.0, 5.0, 5.0, 0.0, 2.0]
    groups = ["a", "a", "b", "b", "c", "c"]
    assert group_zscore(rewards, groups) == pytest.approx([-1.0, 1.0, 0.0, 0.0, -1.0, 1.0])
    with pytest.raises(ValueError):
        group_zscore([1.0], ["a", "b"])


def test_discounted_returns_with_gamma_0_4_by_hand():
    # Turn scores 1, 0, 2, 0.5; γ = 0.4:
    # G3 = 0.5; G2 = 2 + 0.4*0.5 = 2.2; G1 = 0 + 0.4*2.2 = 0.88; G0 = 1 + 0.4*0.88 = 1.352
    assert discounted_returns([1.0, 0.0, 2.0, 0.5]) == pytest.approx([1.352, 0.88, 2.2, 0.5])
    assert discounted_returns([1.0, 1.0], gamma=0.0) == [1.0, 1.0]
    assert discounted_returns([]) == []
    with pytest.raises(ValueError):
        discounted_returns([1.0], gamma=1.5)
