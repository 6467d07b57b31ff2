"""H100 reference kernel for level2/cross_entropy_z_loss: per token, from bf16 logits z, loss = lse(z)
- z[target] + z_weight * lse(z)^2 with lse the logsumexp over the vocabulary, in fp32.

One program per row and a single read of the row, the minimum traffic (2 bytes per logit). The row
streams in tiles of UNROLL x CHUNK logits (CHUNK = 256 x warps, so each thread loads UNROLL 16-byte
vectors of 8 bf16 per step, all in flight at once; 2-byte loads for an odd vocabulary such as 50257,
whose rows are not 16-byte aligned). Each lane keeps an online running max and sum of exp(z - max):
per tile it takes the max over its UNROLL values in registers, rescales its sum once, and adds
UNROLL exponentials, so the exp count stays near one per logit (the special-function unit, not DRAM,
would otherwise bound a bf16 stream on H100). One cross-lane reduction at the end gives lse; the
target logit is one scalar load. Lanes past the row's end load -inf and are guarded so exp never
sees inf - inf. The loss is fp32, as the reference returns it. Row offsets are int64.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

NUM_WARPS = 8  # warps per row program; CHUNK = 256 * NUM_WARPS logits per tile row
UNROLL = 4  # tile rows: 16-byte loads in flight per thread and step
TUNABLES = {"NUM_WARPS": [4, 8, 16], "UNROLL": [2, 4, 8]}


@triton.jit
def _ce_z_loss_kernel(x_ptr, t_ptr, out_ptr, cols, z_weight, UNROLL: tl.constexpr, CHUNK: tl.constexpr):
    pid = tl.program_id(0)
    row = pid.to(tl.int64) * cols
    u = tl.arange(0, UNROLL)
    c = tl.arange(0, CHUNK)
    tile = u[:, None] * CHUNK + c[None, :]
    m_v = tl.full((CHUNK,), float("-inf"), tl.float32)
    s_v = tl.zeros((CHUNK,), tl.float32)
    for start in range(0, cols, UNROLL * CHUNK):
        idx = start + tile
        x = tl.load(x_ptr + row + idx, mask=idx < cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m_v, tl.max(x, axis=0))
        dead = m_new == float("-inf")  # nothing finite seen in this lane yet
        e = tl.where(dead[None, :], 0.0, tl.exp(x - m_new[None, :]))
        s_v = s_v * tl.where(dead, 1.0, tl.exp(m_v - m_new)) + tl.sum(e, axis=0)
        m_v = m_new
    m = tl.max(m_v, axis=0)
    s = tl.sum(s_v * tl.where(m_v == float("-inf"), 0.0, tl.exp(m_v - m)), axis=0)
    lse = m + tl.log(s)
    tgt = tl.load(t_ptr + pid).to(tl.int64)
    picked = tl.load(x_ptr + row + tgt).to(tl.float32)
    tl.store(out_ptr + pid, lse - picked + z_weight * lse * lse)


class ModelNew(nn.Module):
    def __init__(self, z_weight: float):
        super().__init__()
        self.z_weight = z_weight

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = logits.contiguous()
        t = targets.contiguous()
        rows, cols = x.shape
        out = torch.empty((rows,), device=x.device, dtype=torch.float32)
        if rows == 0:
            return out
        chunk = min(256 * NUM_WARPS, triton.next_power_of_2(cols))
        unroll = min(UNROLL, triton.next_power_of_2(triton.cdiv(cols, chunk)))
        warps = max(1, min(NUM_WARPS, chunk // 256))
        _ce_z_loss_kernel[(rows,)](x, t, out, cols, float(self.z_weight), UNROLL=unroll, CHUNK=chunk,
                                   num_warps=warps)
        return out
