"""Per-token cross-entropy of bf16 LM logits over the Llama-3 vocabulary (128256) against integer
targets, computed in fp32: a kernel must stream each row once with an online logsumexp."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["loss", "softmax", "reduction", "llm", "memory-bound"]
TOLERANCE = {"atol": 1e-3, "rtol": 1e-3}  # fp32 losses from exact bf16 logits: no bf16 rounding

TOKENS = 8192
VOCAB = 128256

SHAPES = {
    "small": {"TOKENS": 6, "VOCAB": 50},
    "odd": {"TOKENS": 1001, "VOCAB": 151936},
    "short": {"TOKENS": 512, "VOCAB": 256000},
}


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), targets, reduction="none")


def get_inputs():
    return [torch.randn(TOKENS, VOCAB) * 3.0, torch.randint(0, VOCAB, (TOKENS,))]


def get_init_inputs():
    return []


def flops(TOKENS, VOCAB):
    return 4.0 * TOKENS * VOCAB


def bytes_moved(TOKENS, VOCAB):
    return 2.0 * TOKENS * VOCAB + 8.0 * TOKENS + 4.0 * TOKENS
