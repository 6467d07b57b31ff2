"""Backward pass of cross-entropy summed over tokens, over a large vocabulary (bf16 logits): the
logits' gradient, softmax(logits) - onehot(target), in closed form (computed in fp32)."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["backward", "loss", "softmax", "llm", "memory-bound"]
# Probabilities over a 128k vocabulary are O(1e-5): compared relative to that scale (bf16 keeps
# its relative precision there), not with bf16's absolute 2e-2, which zeros would pass.
TOLERANCE = {"atol": 1e-6, "rtol": 2e-2}

TOKENS = 8192
VOCAB = 128256

SHAPES = {
    "small": {"TOKENS": 4, "VOCAB": 30},
    "odd": {"TOKENS": 1001, "VOCAB": 151936},
    "short": {"TOKENS": 512, "VOCAB": 256000},
}


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits.float(), dim=-1)
        probs[torch.arange(logits.shape[0], device=logits.device), targets] -= 1.0
        return probs.to(logits.dtype)


def get_inputs():
    return [torch.randn(TOKENS, VOCAB), torch.randint(0, VOCAB, (TOKENS,))]


def get_init_inputs():
    return []


def flops(TOKENS, VOCAB):
    return 5.0 * TOKENS * VOCAB


def bytes_moved(TOKENS, VOCAB):
    return 2.0 * 2 * TOKENS * VOCAB + 8.0 * TOKENS
