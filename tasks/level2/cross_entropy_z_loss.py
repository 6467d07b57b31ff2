"""Cross-entropy plus z-loss (PaLM, OLMo), per token, from bf16 logits over a large vocabulary:
loss = logsumexp(z) - z[target] + 1e-4 * logsumexp(z)^2. One pass over each row suffices."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["loss", "softmax", "reduction", "fusion", "llm", "memory-bound"]
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # fp32 losses from exact bf16 logits: no bf16 rounding

TOKENS = 8192
VOCAB = 100352
Z_WEIGHT = 1e-4

SHAPES = {
    "small": {"TOKENS": 5, "VOCAB": 64},
    "cpu": {"TOKENS": 128, "VOCAB": 32000},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"TOKENS": 1001, "VOCAB": 50257},
    "large_vocab": {"TOKENS": 4096, "VOCAB": 256000},
}


class Model(nn.Module):
    def __init__(self, z_weight: float):
        super().__init__()
        self.z_weight = z_weight

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        z = logits.float()
        lse = torch.logsumexp(z, dim=-1)
        picked = z.gather(1, targets[:, None]).squeeze(1)
        return lse - picked + self.z_weight * lse.square()


def get_inputs():
    return [torch.randn(TOKENS, VOCAB) * 3.0 + 2.0, torch.randint(0, VOCAB, (TOKENS,))]


def get_init_inputs():
    return [Z_WEIGHT]


def flops(TOKENS, VOCAB):
    return 4.0 * TOKENS * VOCAB


def bytes_moved(TOKENS, VOCAB):
    return 2.0 * TOKENS * VOCAB + 12.0 * TOKENS
