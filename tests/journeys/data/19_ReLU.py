# Written for agentforge's tests: it mimics the format of KernelBench's level-1 problems (not a copy).
import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Applies a ReLU activation to its input.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): input of any shape.

        Returns:
            torch.Tensor: max(x, 0), elementwise.
        """
        return torch.relu(x)


batch_size = 4096
dim = 393216


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # no special initialization inputs
