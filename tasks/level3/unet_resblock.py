"""A diffusion UNet residual block, fp32: GroupNorm-SiLU-conv3x3, plus a projected timestep
embedding broadcast over space, GroupNorm-SiLU-conv3x3, plus the input."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["block", "conv", "norm", "diffusion", "compute-bound"]

BATCH = 8
CHANNELS = 320
HEIGHT = 64
WIDTH = 64
TIME_DIM = 1280
GROUPS = 32

SHAPES = {
    "small": {"BATCH": 2, "CHANNELS": 8, "HEIGHT": 5, "WIDTH": 6, "TIME_DIM": 16, "GROUPS": 4},
    "odd": {"BATCH": 3, "CHANNELS": 96, "HEIGHT": 45, "WIDTH": 37, "TIME_DIM": 384, "GROUPS": 32},
    "low_res": {"BATCH": 16, "CHANNELS": 1280, "HEIGHT": 16, "WIDTH": 16, "TIME_DIM": 1280, "GROUPS": 32},
}


def _norm(channels: int, groups: int) -> nn.GroupNorm:
    norm = nn.GroupNorm(groups, channels, eps=1e-5)
    nn.init.normal_(norm.weight, mean=1.0, std=0.1)
    nn.init.normal_(norm.bias, std=0.1)
    return norm


class Model(nn.Module):
    def __init__(self, channels: int, time_dim: int, groups: int):
        super().__init__()
        self.norm1, self.norm2 = _norm(channels, groups), _norm(channels, groups)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.time = nn.Linear(time_dim, channels)
        for layer, fan_in in ((self.conv1, 9 * channels), (self.conv2, 9 * channels), (self.time, time_dim)):
            nn.init.normal_(layer.weight, std=fan_in**-0.5)
            nn.init.normal_(layer.bias, std=0.1)

    def forward(self, x: torch.Tensor, t_emb: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.time(F.silu(t_emb))[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return x + h


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH), torch.randn(BATCH, TIME_DIM)]


def get_init_inputs():
    return [CHANNELS, TIME_DIM, GROUPS]


def flops(BATCH, CHANNELS, HEIGHT, WIDTH, TIME_DIM):
    return 2 * 2.0 * BATCH * CHANNELS * HEIGHT * WIDTH * 9 * CHANNELS + 2.0 * BATCH * TIME_DIM * CHANNELS


def bytes_moved(BATCH, CHANNELS, HEIGHT, WIDTH, TIME_DIM):
    weights = 2 * 9 * CHANNELS * CHANNELS + TIME_DIM * CHANNELS + 8 * CHANNELS
    return 4.0 * (2 * BATCH * CHANNELS * HEIGHT * WIDTH + weights + BATCH * TIME_DIM)
