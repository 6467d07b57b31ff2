"""3x3 convolution, stride 1, padding 1, NCHW, fp32 with bias (a ResNet stage's workhorse)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["conv", "vision", "compute-bound"]

BATCH = 32
IN_CH = 128
OUT_CH = 128
HEIGHT = 56
WIDTH = 56

SHAPES = {
    "small": {"BATCH": 2, "IN_CH": 3, "OUT_CH": 4, "HEIGHT": 7, "WIDTH": 9},
    "odd": {"BATCH": 5, "IN_CH": 67, "OUT_CH": 99, "HEIGHT": 45, "WIDTH": 53},
    "early": {"BATCH": 16, "IN_CH": 64, "OUT_CH": 64, "HEIGHT": 224, "WIDTH": 224},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_ch, in_ch, 3, 3) * (9 * in_ch) ** -0.5)
        self.bias = nn.Parameter(0.1 * torch.randn(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, self.weight, self.bias, padding=1)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]


def flops(BATCH, IN_CH, OUT_CH, HEIGHT, WIDTH):
    return 2.0 * BATCH * OUT_CH * HEIGHT * WIDTH * IN_CH * 9


def bytes_moved(BATCH, IN_CH, OUT_CH, HEIGHT, WIDTH):
    return 4.0 * (BATCH * (IN_CH + OUT_CH) * HEIGHT * WIDTH + OUT_CH * IN_CH * 9 + OUT_CH)
