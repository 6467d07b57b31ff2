"""Planted mutants of shipped kernels (level1/softmax, level1/cumsum): the emulation catches what a
GPU shows.

The originals and the mutants are built into one extension (one host-compiler run), each in a
namespace of its own: a removed `__syncthreads` (a race on the block's scratch, which the thread
schedules expose); a loop bound one short (the last column never written), which passes on the
`small` shape (vector path) and fails on a shape like `odd` (scalar path); out-of-bounds accesses,
which fault on a guard page as compute-sanitizer reports them on a GPU: a global read one past the
input's end, a global write one past the output's end, a global read one before the input's start,
and a read one past the block's static or dynamic shared window; the shipped relu (no barrier: its
threads run as plain calls, not fibers) reading one float4 past its input's end."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

ILLEGAL = r"CUDA error \(CPU emulation\): an illegal memory access was encountered: "


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


@pytest.fixture
def guard(features: Any) -> Iterator[Any]:
    """Sets the guard allocator's placement for one test (0 underflow, 1 overflow mode)."""
    yield features.guard_mode
    features.guard_mode(-1)
    features.reset_device()


def test_allocations_meet_a_guard_at_either_end(features: Any) -> None:
    """Drawn per allocation: both directions are tested by a few trials' fresh inputs."""
    kept = [torch.empty(1031) for _ in range(64)]
    at_end = [(t.data_ptr() + 4124) % 4096 == 0 for t in kept]
    at_start = [t.data_ptr() % 4096 == 0 for t in kept]
    assert all(e != s for e, s in zip(at_end, at_start, strict=True)) and 0 < sum(at_end) < 64
    x = torch.randn(3000)  # gelu's CPU kernel takes raw buffers (raw_allocate: data and context one pointer)
    assert torch.allclose(torch.nn.functional.gelu(x), 0.5 * x * (1 + torch.erf(x / 2**0.5)), atol=1e-6)


def test_honest_kernels_pass_with_every_guard_placement(features: Any, guard: Any) -> None:
    for mode in (0, 1):
        guard(mode)
        assert _agree(features.original, torch.randn(8, 48)) == [True] * 3  # float4 loads stay aligned
        assert _agree(features.original, torch.randn(3, 1031)) == [True] * 3
        for fn in (features.cumsum_static, features.cumsum_dyn):
            x = torch.randn(4, 70)
            assert all(torch.allclose(fn(x), x.cumsum(-1), atol=1e-4) for _ in range(3))  # both window ends


def test_a_global_read_past_the_end_is_caught(features: Any, guard: Any) -> None:
    guard(1)
    with pytest.raises(RuntimeError, match=ILLEGAL + r"out-of-bounds global read at 0x[0-9a-f]+, 0 bytes past "
                       r"the end of a 12372-byte allocation"):
        features.read_past_end(torch.randn(3, 1031))


def test_a_global_write_past_the_end_is_caught(features: Any, guard: Any) -> None:
    guard(1)
    with pytest.raises(RuntimeError, match=ILLEGAL + r"out-of-bounds global write at 0x[0-9a-f]+, 0 bytes past "
                       r"the end of a 12372-byte allocation"):
        features.write_past_end(torch.randn(3, 1031))


def test_a_negative_index_read_is_caught(features: Any, guard: Any) -> None:
    guard(0)
    with pytest.raises(RuntimeError, match=ILLEGAL + r"out-of-bounds global read at 0x[0-9a-f]+, 4 bytes before "
                       r"the start of a 12372-byte allocation"):
        features.read_before_start(torch.randn(3, 1031))


def _faults(features: Any, fn: Any, calls: int) -> list[str]:
    found = []
    for _ in range(calls):
        try:
            fn(torch.randn(4, 70))
        except RuntimeError as exc:
            found.append(str(exc))
            features.reset_device()  # the fault is sticky, as on a GPU
    return found


def test_a_dynamic_shared_read_past_the_window_is_caught(features: Any, guard: Any) -> None:
    """Launches alternate the guarded end of the window: one of two calls has it at the end."""
    found = _faults(features, features.cumsum_dyn_oob, 2)
    assert len(found) == 1 and "out-of-bounds dynamic shared read, 0 bytes past the end of the launch's 32-byte " \
        "extern __shared__ window" in found[0], found


def test_a_static_shared_read_past_the_window_is_caught(features: Any, guard: Any) -> None:
    """The block's static window (the tile, then the warp totals) is known from the site's first launch
    on; one of the next two launches puts its end against the guard."""
    found = _faults(features, features.cumsum_static_oob, 3)
    assert found and all(ILLEGAL.replace("\\", "") in f and "out-of-bounds static shared read, 0 bytes past the end "
                         "of the block's 8496-byte __shared__ window" in f for f in found), found


def test_barrier_free_kernels_run_as_plain_calls_and_are_checked_too(plain: Any, features: Any, guard: Any) -> None:
    for mode in (0, 1):
        guard(mode)
        for n in (1000, 1003):  # float4 path, then its scalar tail
            x = torch.randn(n)
            assert all(torch.equal(plain.relu(x), torch.relu(x)) for _ in range(3))
    guard(1)
    with pytest.raises(RuntimeError, match=ILLEGAL + r"out-of-bounds global read at 0x[0-9a-f]+, 0 bytes past "
                       r"the end of a 4000-byte allocation"):
        plain.relu_read_past_end(torch.randn(1000))
