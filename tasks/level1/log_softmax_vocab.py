"""Log-softmax of LM logits over the Llama-3 vocabulary (128256), in fp32."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["softmax", "llm", "reduction", "memory-bound"]

TOKENS = 2048
VOCAB = 128256

SHAPES = {
    "small": {"TOKENS": 4, "VOCAB": 100},
    "cpu": {"TOKENS": 32, "VOCAB": 128256},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"TOKENS": 333, "VOCAB": 151936},
    "decode": {"TOKENS": 64, "VOCAB": 128256},
}


class Model(nn.Module):
    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(logits, dim=-1)


def get_inputs():
    return [torch.randn(TOKENS, VOCAB) * 4.0]


def get_init_inputs():
    return []


def flops(TOKENS, VOCAB):
    return 4.0 * TOKENS * VOCAB


def bytes_moved(TOKENS, VOCAB):
    return 4.0 * 2 * TOKENS * VOCAB
