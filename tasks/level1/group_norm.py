"""GroupNorm (32 groups) with affine parameters on an NCHW activation, in fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["norm", "vision", "memory-bound"]

BATCH = 16
CHANNELS = 256
HEIGHT = 64
WIDTH = 64
GROUPS = 32

SHAPES = {
    "small": {"BATCH": 2, "CHANNELS": 8, "HEIGHT": 5, "WIDTH": 6, "GROUPS": 4},
    "odd": {"BATCH": 3, "CHANNELS": 96, "HEIGHT": 45, "WIDTH": 51, "GROUPS": 32},
    "wide": {"BATCH": 8, "CHANNELS": 512, "HEIGHT": 128, "WIDTH": 128, "GROUPS": 32},
}


class Model(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.group_norm(x, self.groups, self.weight, self.bias, eps=1e-5)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, GROUPS]


def flops(BATCH, CHANNELS, HEIGHT, WIDTH):
    return 7.0 * BATCH * CHANNELS * HEIGHT * WIDTH


def bytes_moved(BATCH, CHANNELS, HEIGHT, WIDTH):
    return 4.0 * (2 * BATCH * CHANNELS * HEIGHT * WIDTH + 2 * CHANNELS)
