"""Inputs too large to draw anew each repetition are a secret per-element mixture of two pool
entries, scaled: never a scalar multiple of anything seen before (issue 31: a content-keyed cache
replayed a linear operation's outputs at 147x when the pool was only rescaled)."""

from __future__ import annotations

import random

import torch
from agentforge.evaluator.judge.stage_timing import mix_pool


def _pool(entries: int = 4) -> list[list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [[torch.randn(4096, generator=gen), torch.randint(0, 100, (64,), generator=gen)] for _ in range(entries)]


def _scalar_multiple(x: torch.Tensor, y: torch.Tensor) -> bool:
    ratio = x / y
    return bool(torch.allclose(ratio, ratio[0].expand_as(ratio), rtol=1e-4))


def test_each_refill_is_a_fresh_mixture_never_a_multiple_of_a_pooled_entry() -> None:
    pool = _pool()
    buffers = [torch.empty(4096), torch.empty(64, dtype=torch.int64)]
    secret = random.SystemRandom()
    seen = []
    for _ in range(8):
        mix_pool(buffers, pool, secret, torch.device("cpu"))
        x = buffers[0].clone()
        assert not any(_scalar_multiple(x, entry[0]) for entry in pool)  # a replay keyed on content misses
        # Every element is one of two pooled values at one common scale: the task's own distribution.
        pairs = [(a[0], b[0]) for a in pool for b in pool if a is not b]
        assert any(torch.all(torch.isclose(x, a * (x[0] / a[0])) | torch.isclose(x, b * (x[0] / a[0])))
                   or torch.all(torch.isclose(x, a * (x[0] / b[0])) | torch.isclose(x, b * (x[0] / b[0])))
                   for a, b in pairs)
        assert any(torch.equal(buffers[1], entry[1]) for entry in pool)  # indices keep one entry's structure
        assert not any(torch.equal(x, s) for s in seen)
        seen.append(x)


def test_the_cross_check_compares_the_same_secret_positions_on_both_sides() -> None:
    from agentforge.evaluator.judge.stage_timing import CROSSCHECK_SAMPLE, secret_sample

    out = torch.arange(3 * CROSSCHECK_SAMPLE, dtype=torch.float32)
    small = torch.arange(10, dtype=torch.float32)
    mine, theirs = secret_sample((out, small), (out.clone() * 1.0, small.clone()), random.SystemRandom())
    assert mine[0].numel() == CROSSCHECK_SAMPLE and torch.equal(mine[0], theirs[0])  # the same positions
    assert torch.equal(mine[1], small)  # a small output is compared whole
    again, _ = secret_sample((out, small), (out, small), random.SystemRandom())
    assert not torch.equal(again[0], mine[0])  # drawn anew each time
    odd = torch.zeros(5)
    assert secret_sample(odd, small, random.SystemRandom()) == (odd, small)  # compare names the mismatch
