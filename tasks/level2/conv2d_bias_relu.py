"""3x3 convolution with bias and ReLU, NCHW fp32: the activation belongs in the conv's epilogue."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["conv", "activation", "fusion", "vision", "compute-bound"]

BATCH = 32
IN_CH = 64
OUT_CH = 128
HEIGHT = 112
WIDTH = 112

SHAPES = {
    "small": {"BATCH": 2, "IN_CH": 3, "OUT_CH": 5, "HEIGHT": 8, "WIDTH": 6},
    "odd": {"BATCH": 3, "IN_CH": 45, "OUT_CH": 67, "HEIGHT": 71, "WIDTH": 59},
    "deep": {"BATCH": 64, "IN_CH": 512, "OUT_CH": 512, "HEIGHT": 14, "WIDTH": 14},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_ch, in_ch, 3, 3) * (9 * in_ch) ** -0.5)
        self.bias = nn.Parameter(0.3 * torch.randn(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.conv2d(x, self.weight, self.bias, padding=1))


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]


def flops(BATCH, IN_CH, OUT_CH, HEIGHT, WIDTH):
    return 2.0 * BATCH * OUT_CH * HEIGHT * WIDTH * (9 * IN_CH + 1)


def bytes_moved(BATCH, IN_CH, OUT_CH, HEIGHT, WIDTH):
    return 4.0 * (BATCH * (IN_CH + OUT_CH) * HEIGHT * WIDTH + OUT_CH * (9 * IN_CH + 1))
