"""Run Triton kernels on the CPU through Triton's interpreter, so that a machine without a GPU
checks their indexing, masking and arithmetic against the reference.

The interpreter stores bfloat16 as raw uint16 and, in the versions we checked (3.9), applies
numpy's arithmetic, comparisons and `tl.dot` to those bit patterns: `x + y`, `x < y` and
`tl.dot(a, b)` on bf16 operands give garbage; and it converts fp32 to bf16 by truncation, where a
GPU rounds to nearest even (doubling the error of every bf16 output). `enable()` patches the
interpreter's builder so that bf16 operands are widened to fp32, computed, and rounded back to
bf16 to nearest even, which is what a GPU's bf16 instructions do. tests/evaluator/test_triton_interpret.py pins each
repaired case against PyTorch.

What the interpreter cannot show: timing (it is numpy, program by program), races between
programs (they run one after another), and the precision of GPU `tl.dot` on fp32 inputs (TF32 by
default there, exact here). Records of interpreted runs say `measured: false`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

ENV = "TRITON_INTERPRET"
# The largest shape (input and parameter elements) a verdict runs in the interpreter: it costs about
# 24 us per element a call on the 2-core VM (column_max: 0.26 M elements 6.6 s, 1 M 24 s), and a
# verdict makes several calls per shape. Larger shapes are dry-launched and compiled only.
MAX_ELEMENTS = 2**20
_PATCHED = "_agentforge_bf16_patched"


class TritonImportedTooEarly(RuntimeError):
    """Triton was imported before the interpreter was switched on: its own `@jit` helpers
    (tl.sum, tl.max, ...) were then built for the GPU, and fail inside interpreted kernels."""


def available() -> bool:
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def enable() -> None:
    """Switch the interpreter on for every `@triton.jit` defined from now on, and repair its bf16
    arithmetic. Must run before the first `import triton` in this process."""
    already = "triton" in sys.modules
    os.environ[ENV] = "1"
    if already and not _interpreting_helpers():
        raise TritonImportedTooEarly("triton was imported before TRITON_INTERPRET was set; "
                                     "enable() must run first in the process")
    _patch_bf16()


def prepare_for(backend: str, device: str, compile_only: bool) -> None:
    """In a fresh evaluation process, before anything imports triton (torch._dynamo does): switch
    the interpreter on when this job will need it, a Triton kernel on a machine without a GPU."""
    if backend != "triton" or compile_only or device.startswith("cuda") or "triton" in sys.modules:
        return
    if device == "auto":
        import torch

        if torch.cuda.is_available():
            return
    os.environ[ENV] = "1"


def _interpreting_helpers() -> bool:
    import triton.language.standard as standard
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(getattr(standard, "sum", None), InterpretedFunction)


def _patch_bf16() -> None:
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    if getattr(builder, _PATCHED, False):
        return

    def widen(handle: Any) -> Any:
        if handle.dtype.scalar == tl.bfloat16:
            bits = torch.from_numpy(np.ascontiguousarray(handle.data).view(np.int16))
            return interp.TensorHandle(bits.view(torch.bfloat16).float().numpy(), tl.float32)
        return handle

    def narrow(handle: Any) -> Any:
        if handle.dtype.scalar == tl.float32 and handle.data.dtype == np.float32:
            rounded = torch.from_numpy(np.ascontiguousarray(handle.data)).to(torch.bfloat16)  # round to nearest even
            return interp.TensorHandle(rounded.view(torch.int16).numpy().view(np.uint16), tl.bfloat16)
        return handle

    original_cast = builder.cast_impl
    original_fp_to_fp = builder.create_fp_to_fp
    rtz = interp._ir.ROUNDING_MODE.RTZ

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        # The interpreter truncates fp32 -> bf16 (rounds toward zero); the GPU rounds to nearest even.
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return narrow(src)
        return original_cast(self, src, dst_type)

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16 and rounding_mode != rtz:
            return narrow(src)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    original_binary = builder.binary_op
    original_unary = builder.unary_op
    original_dot = builder.create_dot

    def binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        if lhs.dtype.scalar == tl.bfloat16 or rhs.dtype.scalar == tl.bfloat16:
            out = original_binary(self, widen(lhs), widen(rhs), op)
            return narrow(out)
        return original_binary(self, lhs, rhs, op)

    def unary_op(self: Any, arg: Any, op: Any) -> Any:
        if arg.dtype.scalar == tl.bfloat16:
            return narrow(original_unary(self, widen(arg), op))
        return original_unary(self, arg, op)

    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            out = original_dot(self, widen(a), widen(b), widen(d), input_precision, max_num_imprecise_acc)
            return narrow(out) if d.dtype.scalar == tl.bfloat16 else out
        return original_dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    builder.cast_impl = cast_impl
    builder.create_fp_to_fp = create_fp_to_fp
    builder.binary_op = binary_op
    builder.unary_op = unary_op
    builder.create_dot = create_dot
    setattr(builder, _PATCHED, True)
