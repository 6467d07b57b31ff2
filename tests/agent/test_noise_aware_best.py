"""A new best only beyond the noise: its speedup interval must clear the old best's."""

from __future__ import annotations

from agentforge.agent.beam import beats
from agentforge.agent.nodes import _better


def _kernel(speedup: float, ci: list[float] | None) -> dict:
    return {"speedup": speedup, "speedup_ci": ci, "candidate_us": 100.0 / speedup, "accepted": True}


def test_a_faster_point_inside_the_old_interval_is_not_a_new_best() -> None:
    old = _kernel(2.0, [1.8, 2.2])
    assert not beats(_kernel(2.1, [1.9, 2.3]), old)
    assert not _better(_kernel(2.1, [1.9, 2.3]), old)


def test_an_interval_wholly_above_the_old_one_is_a_new_best() -> None:
    old = _kernel(2.0, [1.8, 2.2])
    assert beats(_kernel(2.6, [2.3, 2.9]), old)
    assert _better(_kernel(2.6, [2.3, 2.9]), old)


def test_without_intervals_the_points_decide() -> None:
    assert beats(_kernel(2.1, None), _kernel(2.0, [1.8, 2.2]))
    assert not beats(_kernel(1.9, None), _kernel(2.0, None))
    assert beats({"candidate_us": 5.0}, {"candidate_us": 10.0})  # untimed against eager: the faster one
