"""Token-embedding lookup: gather rows of a (128256 x 4096) bf16 table by token id."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["embedding", "gather", "llm", "memory-bound"]

BATCH = 8
SEQ = 4096
VOCAB = 128256
HIDDEN = 4096

SHAPES = {
    "small": {"BATCH": 2, "SEQ": 5, "VOCAB": 50, "HIDDEN": 24},
    "odd": {"BATCH": 3, "SEQ": 1001, "VOCAB": 151936, "HIDDEN": 3584},
    "decode": {"BATCH": 256, "SEQ": 1, "VOCAB": 128256, "HIDDEN": 8192},
}


class Model(nn.Module):
    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab, hidden))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.weight[ids]


def get_inputs():
    return [torch.randint(0, VOCAB, (BATCH, SEQ))]


def get_init_inputs():
    return [VOCAB, HIDDEN]


def flops(BATCH, SEQ):
    return 0.0


def bytes_moved(BATCH, SEQ, HIDDEN):
    return 2.0 * 2 * BATCH * SEQ * HIDDEN + 8.0 * BATCH * SEQ
