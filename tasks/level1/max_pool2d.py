"""3x3 max pooling with stride 2 and padding 1 (ResNet's stem), NCHW fp32."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["pool", "vision", "memory-bound"]

BATCH = 64
CHANNELS = 64
HEIGHT = 224
WIDTH = 224

SHAPES = {
    "small": {"BATCH": 2, "CHANNELS": 3, "HEIGHT": 9, "WIDTH": 8},
    "odd": {"BATCH": 3, "CHANNELS": 67, "HEIGHT": 111, "WIDTH": 97},
    "late": {"BATCH": 256, "CHANNELS": 256, "HEIGHT": 56, "WIDTH": 56},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, kernel_size=3, stride=2, padding=1)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []


def flops(BATCH, CHANNELS, HEIGHT, WIDTH):
    return 9.0 * BATCH * CHANNELS * ((HEIGHT + 1) // 2) * ((WIDTH + 1) // 2)


def bytes_moved(BATCH, CHANNELS, HEIGHT, WIDTH):
    return 4.0 * BATCH * CHANNELS * (HEIGHT * WIDTH + ((HEIGHT + 1) // 2) * ((WIDTH + 1) // 2))
