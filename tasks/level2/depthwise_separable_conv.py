"""MobileNet's depthwise-separable convolution, fp32: depthwise 3x3, then a pointwise 1x1 to
more channels, then ReLU6. Fusing keeps the depthwise output on chip."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["conv", "depthwise", "fusion", "vision", "memory-bound"]

BATCH = 64
IN_CH = 128
OUT_CH = 256
HEIGHT = 56
WIDTH = 56

SHAPES = {
    "small": {"BATCH": 2, "IN_CH": 4, "OUT_CH": 6, "HEIGHT": 6, "WIDTH": 7},
    "odd": {"BATCH": 3, "IN_CH": 97, "OUT_CH": 131, "HEIGHT": 29, "WIDTH": 31},
    "late": {"BATCH": 128, "IN_CH": 512, "OUT_CH": 1024, "HEIGHT": 7, "WIDTH": 7},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.depthwise = nn.Parameter(torch.randn(in_ch, 1, 3, 3) / 3.0)
        self.pointwise = nn.Parameter(torch.randn(out_ch, in_ch, 1, 1) * in_ch**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x, self.depthwise, padding=1, groups=x.shape[1])
        return F.relu6(F.conv2d(y, self.pointwise) * 3.0)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]


def flops(BATCH, IN_CH, OUT_CH, HEIGHT, WIDTH):
    return 2.0 * BATCH * HEIGHT * WIDTH * (9 * IN_CH + IN_CH * OUT_CH)


def bytes_moved(BATCH, IN_CH, OUT_CH, HEIGHT, WIDTH):
    return 4.0 * (BATCH * (IN_CH + OUT_CH) * HEIGHT * WIDTH + 9 * IN_CH + IN_CH * OUT_CH)
