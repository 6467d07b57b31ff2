"""Depthwise 3x3 convolution (one filter per channel), stride 1, padding 1, NCHW, fp32: the
memory-bound half of a MobileNet/ConvNeXt block."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["conv", "depthwise", "vision", "memory-bound"]

BATCH = 32
CHANNELS = 384
HEIGHT = 56
WIDTH = 56

SHAPES = {
    "small": {"BATCH": 2, "CHANNELS": 5, "HEIGHT": 6, "WIDTH": 7},
    "odd": {"BATCH": 3, "CHANNELS": 97, "HEIGHT": 57, "WIDTH": 61},
    "late": {"BATCH": 64, "CHANNELS": 1536, "HEIGHT": 14, "WIDTH": 14},
}


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, 3, 3) / 3.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, padding=1, groups=x.shape[1])


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]


def flops(BATCH, CHANNELS, HEIGHT, WIDTH):
    return 2.0 * BATCH * CHANNELS * HEIGHT * WIDTH * 9


def bytes_moved(BATCH, CHANNELS, HEIGHT, WIDTH):
    return 4.0 * (2 * BATCH * CHANNELS * HEIGHT * WIDTH + 9 * CHANNELS)
