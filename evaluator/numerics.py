"""The process-wide numeric switches every comparison and every compiled baseline runs under."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def numeric_switches(enabled: bool) -> Iterator[None]:
    """TF32 off and fp32 matmuls at highest precision on both sides of every comparison, cuDNN
    neither autotuned nor forced deterministic (PyTorch's defaults: deterministic algorithms
    slow eager convolutions, which would inflate every conv speedup); the previous values are
    restored afterwards."""
    if not enabled:
        yield
        return
    import torch

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision(), torch.backends.cudnn.deterministic,
             torch.backends.cudnn.benchmark)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.deterministic = False
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, precision,
         torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark) = saved
        torch.set_float32_matmul_precision(precision)
