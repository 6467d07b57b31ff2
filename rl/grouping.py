"""Group-relative advantages and multi-turn returns.

GRPO compares each completion only with the others drawn for the same prompt: rewards are
z-scored within the group and clipped (CUDA-L1 clips at about ±1.5, so one lucky outlier does
not swamp the step). A group whose rewards are all equal carries no signal and gets zeros.
Multi-turn episodes (Kevin) credit each turn with later turns' scores, discounted by γ.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence

DEFAULT_CLIP = 1.5
DEFAULT_GAMMA = 0.4


def zscore(rewards: Sequence[float], clip: float | None = DEFAULT_CLIP, eps: float = 1e-8) -> list[float]:
    """(r - mean) / std within one group, clipped to ±clip; all zeros when the std is ~0."""
    n = len(rewards)
    if n == 0:
        return []
    mean = sum(rewards) / n
    var = sum((r - mean) ** 2 for r in rewards) / n
    std = math.sqrt(var)
    if std <= eps:
        return [0.0] * n
    scores = [(r - mean) / std for r in rewards]
    if clip is None:
        return scores
    return [min(max(s, -clip), clip) for s in scores]


def group_zscore(rewards: Sequence[float], groups: Sequence[Hashable], clip: float | None = DEFAULT_CLIP
                 ) -> list[float]:
    """Z-score each reward within the members of its group (same prompt), order preserved."""
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group keys")
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    out = [0.0] * len(rewards)
    for idx in members.values():
        for i, score in zip(idx, zscore([rewards[i] for i in idx], clip), strict=True):
            out[i] = score
    return out


def discounted_returns(turn_scores: Sequence[float], gamma: float = DEFAULT_GAMMA) -> list[float]:
    """G_t = r_t + γ r_{t+1} + γ² r_{t+2} + …: a turn is credited for what it led to."""
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must lie in [0, 1], got {gamma}")
    returns = [0.0] * len(turn_scores)
    running = 0.0
    for t in range(len(turn_scores) - 1, -1, -1):
        running = turn_scores[t] + gamma * running
        returns[t] = running
    return returns


def episode_advantages(group: Sequence[Sequence[float]], gamma: float = DEFAULT_GAMMA,
                       clip: float | None = DEFAULT_CLIP) -> list[list[float]]:
    """Kevin's multi-turn credit: each trajectory's per-turn discounted returns, z-scored
    together across every turn of every trajectory in the group (same task), then clipped."""
    returns = [discounted_returns(episode, gamma) for episode in group]
    scores = iter(zscore([g for episode in returns for g in episode], clip))
    return [[next(scores) for _ in episode] for episode in returns]
