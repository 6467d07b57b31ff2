"""y = relu(x): the task of the CPU smoke run (KernelBench format). Signed, zero-mean inputs, so
the identity does not pass for ReLU."""

import torch

N = 4096
SHAPES = {"default": {"N": 4096}, "cpu": {"N": 4096}, "odd": {"N": 1001}}  # cpu: the smoke runs' shape
TAGS = ["elementwise", "smoke"]


class Model(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
