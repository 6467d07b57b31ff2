"""Group z-scores with clipping, zero-variance groups, discounted multi-turn returns."""

from __future__ import annotations

import math

import pytest
from agentforge.rl.grouping import discounted_returns, episode_advantages, group_zscore, zscore


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


def test_episode_advantages_z_score_returns_across_the_group():
    # Two trajectories of two turns, γ = 0.4: returns [1 + 0.4*2, 2] = [1.8, 2] and
    # [-1 + 0.4*-1, -1] = [-1.4, -1].
    advantages = episode_advantages([[1.0, 2.0], [-1.0, -1.0]], clip=None)
    flat = [1.8, 2.0, -1.4, -1.0]
    mean = sum(flat) / 4
    std = math.sqrt(sum((g - mean) ** 2 for g in flat) / 4)
    assert advantages[0] == pytest.approx([(1.8 - mean) / std, (2.0 - mean) / std])
    assert advantages[1] == pytest.approx([(-1.4 - mean) / std, (-1.0 - mean) / std])
    # γ = 0: the returns are the scores [1], [1, 0]; mean 2/3, std sqrt(2)/3.
    short, long = episode_advantages([[1.0], [1.0, 0.0]], gamma=0.0)
    assert short == pytest.approx([1 / math.sqrt(2)])
    assert long == pytest.approx([1 / math.sqrt(2), -math.sqrt(2)])
