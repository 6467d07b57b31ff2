"""A GPT-2-style pre-LN transformer block in fp16: LayerNorm, causal multi-head attention with
biases, residual, LayerNorm, GELU(tanh) MLP with 4x expansion, residual."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float16"
TAGS = ["block", "attention", "causal", "norm", "compute-bound"]

BATCH = 8
SEQ = 1024
HIDDEN = 1600
HEADS = 25

SHAPES = {
    "small": {"BATCH": 1, "SEQ": 9, "HIDDEN": 32, "HEADS": 2},
    "odd": {"BATCH": 3, "SEQ": 1023, "HIDDEN": 1280, "HEADS": 20},
    "medium": {"BATCH": 16, "SEQ": 2048, "HIDDEN": 1024, "HEADS": 16},
}


def _linear(fan_in: int, fan_out: int) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out)
    nn.init.normal_(layer.weight, std=fan_in**-0.5)
    nn.init.normal_(layer.bias, std=0.1)
    return layer


def _layer_norm(hidden: int) -> nn.LayerNorm:
    norm = nn.LayerNorm(hidden)
    nn.init.normal_(norm.weight, mean=1.0, std=0.1)
    nn.init.normal_(norm.bias, std=0.1)
    return norm


class Model(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = _layer_norm(hidden), _layer_norm(hidden)
        self.qkv, self.proj = _linear(hidden, 3 * hidden), _linear(hidden, hidden)
        self.fc, self.fc_out = _linear(hidden, 4 * hidden), _linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        d = hidden // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(hidden, dim=-1)
        q, k, v = (t.view(batch, seq, self.heads, d).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(d))
        x = x + self.proj(att.transpose(1, 2).reshape(batch, seq, hidden))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, HEADS]


def flops(BATCH, SEQ, HIDDEN):
    tokens = BATCH * SEQ
    return 24.0 * tokens * HIDDEN * HIDDEN + 2.0 * BATCH * SEQ * SEQ * HIDDEN


def bytes_moved(BATCH, SEQ, HIDDEN):
    return 2.0 * (12 * HIDDEN * HIDDEN + 2 * BATCH * SEQ * HIDDEN)
