"""GroupNorm then SiLU, as in every diffusion UNet/VAE resblock, NCHW fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["norm", "activation", "fusion", "diffusion", "memory-bound"]

BATCH = 8
CHANNELS = 512
HEIGHT = 64
WIDTH = 64
GROUPS = 32

SHAPES = {
    "small": {"BATCH": 2, "CHANNELS": 8, "HEIGHT": 5, "WIDTH": 4, "GROUPS": 2},
    "odd": {"BATCH": 3, "CHANNELS": 320, "HEIGHT": 45, "WIDTH": 37, "GROUPS": 32},
    "vae": {"BATCH": 4, "CHANNELS": 128, "HEIGHT": 512, "WIDTH": 512, "GROUPS": 32},
}


class Model(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(F.group_norm(x, self.groups, self.weight, self.bias, eps=1e-6))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH) * 2.0 + 0.3]


def get_init_inputs():
    return [CHANNELS, GROUPS]


def flops(BATCH, CHANNELS, HEIGHT, WIDTH):
    return 11.0 * BATCH * CHANNELS * HEIGHT * WIDTH


def bytes_moved(BATCH, CHANNELS, HEIGHT, WIDTH):
    return 4.0 * (2 * BATCH * CHANNELS * HEIGHT * WIDTH + 2 * CHANNELS)
