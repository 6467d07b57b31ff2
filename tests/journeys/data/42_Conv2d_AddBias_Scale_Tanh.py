# Written for agentforge's tests: it mimics the format of KernelBench's level-2 fusion problems (not a copy).
import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A convolution, then a learned per-channel bias, a scale and a tanh.
    """

    def __init__(self, in_channels, out_channels, kernel_size, bias_shape, scale):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.02)
        self.scale = scale

    def forward(self, x):
        x = self.conv(x)
        x = x + self.bias
        x = x * self.scale
        return torch.tanh(x)


batch_size = 128
in_channels = 64
out_channels = 128
height, width = 128, 128
kernel_size = 3
bias_shape = (out_channels, 1, 1)
scale = 0.5


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape, scale]
