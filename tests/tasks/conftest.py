"""Helpers for the task tests: write problem files into a temporary tree."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

KB_STYLE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)

N = 64

def get_inputs():
    A = torch.rand(N, N)
    B = torch.rand(N, N)
    return [A, B]

def get_init_inputs():
    return []
'''


@pytest.fixture
def write_task(tmp_path: Path) -> Callable[..., Path]:
    """write_task(source, name="level1/x.py") writes a dedented problem file and returns its path."""

    def write(source: str, name: str = "level1/case.py") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
        return path

    return write
