"""The emulation executes CUDA C++ as a GPU would: indices, shared memory, barriers, warp
collectives, atomics, half types, cooperative groups, launch limits, and hangs as errors."""

from __future__ import annotations

from typing import Any

import pytest
import torch


def test_3d_indices_cover_every_thread_once(features: Any) -> None:
    out = features.ids(3, 2, 2, 4, 3, 2)
    n = 3 * 2 * 2 * 4 * 3 * 2
    assert torch.equal(out[:, 0], torch.arange(n, dtype=torch.int32))
    coords = {tuple(r) for r in out[:, 1:].tolist()}
    assert len(coords) == n  # (thread, block) pairs are all distinct
    assert out[:, 1].max().item() == 3 + 10 * 2 and out[:, 3].max().item() == 1 + 10 * 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_block_reduction_in_dynamic_shared_memory(features: Any, dtype: torch.dtype) -> None:
    x = torch.randn(1000).to(dtype)
    got = features.sum(x, 128)
    assert torch.allclose(got, x.float().sum().reshape(1), atol=1e-3, rtol=1e-4)


def test_warp_shuffles_votes_and_partial_masks(features: Any) -> None:
    x = torch.arange(64, dtype=torch.float32) - 10.0
    out, votes = features.warps(x)
    out = out.view(64, 5)
    lanes = torch.arange(64)
    warp_sums = x.view(2, 32).sum(1).repeat_interleave(32)
    assert torch.equal(out[:, 0], warp_sums)
    lane = lanes % 32
    down = torch.where(lane + 3 < 32, x[(lanes + 3).clamp(max=63)], x)
    assert torch.equal(out[:, 1], down)
    up = torch.where(lane % 8 >= 2, x[(lanes - 2).clamp(min=0)], x)  # width 8: segments of 8 lanes
    assert torch.equal(out[:, 2], up)
    assert torch.equal(out[:, 3], x[(lanes // 32) * 32 + 5])
    half = x.view(2, 32)[:, :16].sum(1).repeat_interleave(16)
    assert torch.equal(out.view(2, 32, 5)[:, :16, 4].reshape(-1), half)
    v = votes.view(2, 4).tolist()
    assert v[0][0] == -(1 << 11) and v[0][1] == 1 and v[0][2] == 1  # lanes 11..31 of warp 0 are > 0
    assert v[1][0] == -1 and v[0][3] == sum(range(32))


def test_syncthreads_count_and_or(features: Any) -> None:
    x = torch.randn(96)
    assert features.barriers(x).tolist() == [int((x > 0).sum()), 1, 0]


def test_atomics_on_every_type(features: Any) -> None:
    i, f, d, h, b, m = features.atomic_ops(64, 3)
    assert i.tolist() == [192, 63, -63]
    assert f.item() == 96.0 and d.item() == 48.0 and h.item() == 192.0 and b.item() == 192.0
    assert m.tolist() == [7, 384]


def test_half_and_bf16_intrinsics_and_vectors(features: Any) -> None:
    n = 70
    x, y, z = torch.randn(n).half(), torch.randn(n).bfloat16(), torch.randn(n * 4)
    got = features.half_ops(x, y, z)
    xf = x.float()
    want = (xf * xf).half().float() + y.float() * 2 + z.view(n, 4).sum(1) + 1 + 0.5 + 0.25 + 7
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_cooperative_groups_tiles_and_reduce(features: Any) -> None:
    x = torch.randn(64)
    out = features.group_ops(x).view(64, 2)
    assert torch.allclose(out[:, 0], x.view(2, 32).sum(1).repeat_interleave(32), atol=1e-5)
    assert torch.allclose(out[:, 1], x.view(8, 8).sum(1).repeat_interleave(8), atol=1e-5)


def test_a_barrier_half_the_block_skips_is_a_divergence_error(features: Any) -> None:
    with pytest.raises(RuntimeError, match="divergent __syncthreads"):
        features.hang(torch.zeros(32))
    assert features.sticky_error() == 719  # the context is spoilt, as on a GPU, until it is reset
    features.reset_device()


def test_a_shuffle_waiting_for_exited_lanes_is_a_deadlock(features: Any) -> None:
    with pytest.raises(RuntimeError, match=r"deadlock.*__shfl_xor_sync.*exited"):
        features.shuffle_exit(torch.zeros(32))
    features.reset_device()


@pytest.mark.parametrize(("grid_x", "grid_y", "block", "smem", "bounds", "error"), [
    (1, 1, 1025, 0, False, 9),        # more than 1024 threads per block
    (1, 65536, 32, 0, False, 9),      # grid.y past 65535
    (0, 1, 32, 0, False, 9),          # an empty grid
    (1, 1, 32, 49 * 1024, False, 1),  # dynamic shared memory past 48 KiB without the opt-in
    (1, 1, 256, 0, True, 701),        # past __launch_bounds__(128)
    (2, 1, 128, 0, True, 0),
])
def test_launch_limits_are_a_gpus(features: Any, grid_x: int, grid_y: int, block: int, smem: int, bounds: bool,
                                  error: int) -> None:
    x = torch.zeros(4 * 2048)
    assert features.launch_error(x, grid_x, grid_y, block, smem, bounds) == error
    assert features.last_error_after() == 0  # a launch error is not sticky
    if bounds and error:
        assert x.sum().item() == 0  # nothing ran
