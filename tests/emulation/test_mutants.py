"""Planted mutants of a shipped kernel (level1/softmax): the emulation catches what a GPU shows.

The original and two mutants are built into one extension (one host-compiler run), each in a
namespace of its own: a removed `__syncthreads` (a race on the block's scratch, which the thread
schedules expose) and a loop bound one short (the last column never written), which passes on the
`small` shape (vector path) and fails on a shape like `odd` (scalar path)."""

from __future__ import annotations

from typing import Any

import torch


def _agree(fn: Any, x: torch.Tensor) -> list[bool]:
    """Three calls: the three schedule families (forward, reverse, random)."""
    want = torch.softmax(x, -1)
    return [torch.allclose(fn(x), want, atol=1e-5, rtol=1e-4) for _ in range(3)]


def test_the_original_passes_both_paths_on_every_schedule(features: Any) -> None:
    assert _agree(features.original, torch.randn(8, 48)) == [True] * 3  # warp per row, vector loads
    assert _agree(features.original, torch.randn(3, 1031)) == [True] * 3  # block per row, scalar loads


def test_a_removed_syncthreads_is_caught(features: Any) -> None:
    x = torch.randn(3, 1031)  # rows longer than WARP_COLS: one block per row, reduced through shared memory
    assert not all(_agree(features.no_barrier, x))


def test_a_short_loop_bound_passes_small_and_fails_odd(features: Any) -> None:
    assert _agree(features.short_bound, torch.randn(8, 48)) == [True] * 3
    assert not any(_agree(features.short_bound, torch.randn(5, 1001)))
