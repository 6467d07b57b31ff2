"""Inference-mode conv -> BatchNorm -> ReLU (fp32, 3x3, stride 1): the BatchNorm folds into the
conv's weights and bias, the ReLU into its epilogue. The running statistics are buffers."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["conv", "norm", "activation", "fusion", "vision", "compute-bound"]

BATCH = 32
IN_CH = 128
OUT_CH = 128
HEIGHT = 56
WIDTH = 56

SHAPES = {
    "small": {"BATCH": 2, "IN_CH": 4, "OUT_CH": 6, "HEIGHT": 7, "WIDTH": 5},
    "odd": {"BATCH": 5, "IN_CH": 67, "OUT_CH": 97, "HEIGHT": 45, "WIDTH": 45},
    "stem": {"BATCH": 32, "IN_CH": 64, "OUT_CH": 64, "HEIGHT": 112, "WIDTH": 112},
}


class Model(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_ch, in_ch, 3, 3) * (9 * in_ch) ** -0.5)
        self.bn_weight = nn.Parameter(1.0 + 0.2 * torch.randn(out_ch))
        self.bn_bias = nn.Parameter(0.2 * torch.randn(out_ch))
        self.register_buffer("running_mean", 0.2 * torch.randn(out_ch))
        self.register_buffer("running_var", 0.5 + torch.rand(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv2d(x, self.weight, padding=1)
        y = F.batch_norm(y, self.running_mean, self.running_var, self.bn_weight, self.bn_bias,
                         training=False, eps=1e-5)
        return F.relu(y)


def get_inputs():
    return [torch.randn(BATCH, IN_CH, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CH, OUT_CH]


def flops(BATCH, IN_CH, OUT_CH, HEIGHT, WIDTH):
    return 2.0 * BATCH * OUT_CH * HEIGHT * WIDTH * (9 * IN_CH + 2)


def bytes_moved(BATCH, IN_CH, OUT_CH, HEIGHT, WIDTH):
    return 4.0 * (BATCH * (IN_CH + OUT_CH) * HEIGHT * WIDTH + OUT_CH * (9 * IN_CH + 4))
