"""All-pairs cosine similarity of fp16 embeddings (retrieval, CLIP logits): normalise queries
and keys along the feature dimension, then one GEMM, scaled by a learned temperature."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float16"
TAGS = ["gemm", "norm", "fusion", "compute-bound"]

QUERIES = 8192
KEYS = 65536
DIM = 1024

SHAPES = {
    "small": {"QUERIES": 6, "KEYS": 10, "DIM": 16},
    "odd": {"QUERIES": 1001, "KEYS": 30001, "DIM": 768},
    "clip": {"QUERIES": 32768, "KEYS": 32768, "DIM": 512},
}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_temperature = nn.Parameter(torch.tensor(2.3) + 0.1 * torch.randn(()))

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        q = F.normalize(queries.float(), dim=-1).to(queries.dtype)
        k = F.normalize(keys.float(), dim=-1).to(keys.dtype)
        return (q @ k.t()) * self.log_temperature.exp()


def get_inputs():
    return [torch.randn(QUERIES, DIM), torch.randn(KEYS, DIM)]


def get_init_inputs():
    return []


def flops(QUERIES, KEYS, DIM):
    return 2.0 * QUERIES * KEYS * DIM + 3.0 * (QUERIES + KEYS) * DIM


def bytes_moved(QUERIES, KEYS, DIM):
    return 2.0 * ((QUERIES + KEYS) * DIM + QUERIES * KEYS)
