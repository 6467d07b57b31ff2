"""MobileNetV2's inverted residual block, fp32, inference mode: 1x1 expand (x6) + BN + ReLU6,
3x3 depthwise + BN + ReLU6, 1x1 project + BN, identity shortcut. The expanded activation is
six times wider than the block's input: fusing keeps it on chip."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["block", "conv", "depthwise", "norm", "vision", "memory-bound"]

BATCH = 64
CHANNELS = 64
EXPAND = 6
HEIGHT = 28
WIDTH = 28

SHAPES = {
    "small": {"BATCH": 2, "CHANNELS": 4, "EXPAND": 2, "HEIGHT": 5, "WIDTH": 6},
    "odd": {"BATCH": 3, "CHANNELS": 40, "EXPAND": 6, "HEIGHT": 29, "WIDTH": 27},
    "early": {"BATCH": 64, "CHANNELS": 24, "EXPAND": 6, "HEIGHT": 56, "WIDTH": 56},
}


class InferenceBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm on its running statistics whatever the module's mode: the block is an inference
    block, and the evaluator (like KernelBench) runs models in training mode."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)


def _bn(channels: int) -> nn.BatchNorm2d:
    bn = InferenceBatchNorm2d(channels)
    nn.init.normal_(bn.weight, mean=1.0, std=0.2)
    nn.init.normal_(bn.bias, std=0.2)
    bn.running_mean.normal_(std=0.2)
    bn.running_var.uniform_(0.5, 1.5)
    return bn


class Model(nn.Module):
    def __init__(self, channels: int, expand: int):
        super().__init__()
        wide = channels * expand
        self.expand = nn.Conv2d(channels, wide, 1, bias=False)
        self.depthwise = nn.Conv2d(wide, wide, 3, padding=1, groups=wide, bias=False)
        self.project = nn.Conv2d(wide, channels, 1, bias=False)
        for conv, fan_in in ((self.expand, channels), (self.depthwise, 9), (self.project, wide)):
            nn.init.normal_(conv.weight, std=2.0 * fan_in**-0.5)
        self.bn1, self.bn2, self.bn3 = _bn(wide), _bn(wide), _bn(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu6(self.bn1(self.expand(x)))
        h = F.relu6(self.bn2(self.depthwise(h)))
        return x + self.bn3(self.project(h))


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS, EXPAND]


def flops(BATCH, CHANNELS, EXPAND, HEIGHT, WIDTH):
    wide = CHANNELS * EXPAND
    return 2.0 * BATCH * HEIGHT * WIDTH * (2 * CHANNELS * wide + 9 * wide)


def bytes_moved(BATCH, CHANNELS, EXPAND, HEIGHT, WIDTH):
    wide = CHANNELS * EXPAND
    return 4.0 * (2 * BATCH * CHANNELS * HEIGHT * WIDTH + 2 * CHANNELS * wide + 9 * wide + 10 * wide)
