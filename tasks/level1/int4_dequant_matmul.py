"""Weight-only int4 GEMM (W4A16), as in AWQ/GPTQ inference: bf16 activations times int4 weights
packed two per byte, dequantised per group of GROUP input channels with a bf16 scale.

Packing: byte [n, j] holds column 2j in its low nibble and column 2j+1 in its high nibble; a
nibble q in [0, 15] stands for (q - 8) * scale[n, column // GROUP]."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["gemm", "quantized", "int4", "llm", "decode", "memory-bound"]

TOKENS = 16
K = 8192
N = 8192
GROUP = 128

SHAPES = {
    "small": {"TOKENS": 4, "K": 64, "N": 48, "GROUP": 32},
    "odd": {"TOKENS": 7, "K": 4096, "N": 3001, "GROUP": 128},
    "prefill": {"TOKENS": 2048, "K": 8192, "N": 28672, "GROUP": 128},
}


class Model(nn.Module):
    def __init__(self, k: int, n: int, group: int):
        super().__init__()
        self.group = group
        self.register_buffer("packed", torch.randint(0, 256, (n, k // 2), dtype=torch.uint8))
        self.scales = nn.Parameter(torch.randn(n, k // group) * (k**-0.5 / 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = (self.packed & 0x0F).to(torch.int16)
        high = (self.packed >> 4).to(torch.int16)
        q = torch.stack((low, high), dim=-1).reshape(self.packed.shape[0], -1)
        scale = self.scales.float().repeat_interleave(self.group, dim=1)
        w = ((q.float() - 8.0) * scale).to(x.dtype)
        return x @ w.t()


def get_inputs():
    return [torch.randn(TOKENS, K)]


def get_init_inputs():
    return [K, N, GROUP]


def flops(TOKENS, K, N):
    return 2.0 * TOKENS * K * N


def bytes_moved(TOKENS, K, N, GROUP):
    return N * K / 2 + 2.0 * (N * K / GROUP + TOKENS * K + TOKENS * N)
