"""The candidate worker's CUDA-looking machine for an emulated run: real CPU tensors, CUDA answers.

Entered once, for good, by a worker that serves an emulated CUDA job (it serves nothing else):

* `torch.cuda` answers as one device of the job's architecture (the lookalike's patches);
* a device "cuda" anywhere (`.cuda()`, `.to("cuda")`, `device="cuda"` in a factory, a module's
  `.cuda()`) means the CPU, through a torch-function mode, and `Tensor.is_cuda` is true for CPU
  tensors, so the candidate's Python checks pass; its C++ checks pass through the source rewrite;
* every `load_inline` / `cpp_extension.load` builds the emulated extension (`build`), which
  executes the kernels on the CPU; a source that needs a GPU raises `NeedsGpu`, recorded in
  `NEEDS_GPU` whatever the candidate does with it.

Runs only in the candidate worker: everything here executes candidate code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from agentforge.evaluator.cuda_emulation import build
from agentforge.evaluator.cuda_emulation.rewrite import NeedsGpu
from torch.overrides import TorchFunctionMode

NEEDS_GPU: list[str] = []  # the GPU-only constructs met by the builds of this worker
CUDA_SUFFIXES = (".cu", ".cuh")
_active: list[Any] = []


def _cpu(value: Any) -> Any:
    if isinstance(value, str) and value.split(":")[0] == "cuda":
        return "cpu"
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    return value


class CudaMeansCpu(TorchFunctionMode):
    """Device "cuda" in any torch call is the CPU; `Tensor.cuda()` is the tensor itself."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.cuda:
            return args[0]
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        args = tuple(_cpu(a) for a in args)
        return func(*args, **kwargs)


def _record(fn: Any) -> Any:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except NeedsGpu as exc:
            NEEDS_GPU.append(str(exc))
            raise
    return wrapped


def _load(name: str, sources: Any, extra_cflags: Any = None, extra_include_paths: Any = None, **kwargs: Any) -> Any:
    """`cpp_extension.load(name, sources=[files])`, its files read and built as `load_inline` sources."""
    paths = [Path(p) for p in ([sources] if isinstance(sources, str) else sources)]
    cuda = [p.read_text() for p in paths if p.suffix in CUDA_SUFFIXES]
    cpp = [p.read_text() for p in paths if p.suffix not in CUDA_SUFFIXES]
    includes = [*(extra_include_paths or []), *sorted({str(p.parent.resolve()) for p in paths})]
    return build.load_inline_emulated(name, cpp, cuda, None, extra_cflags, includes)


def activate(arch: str) -> None:
    """Make this worker process a CUDA-looking machine whose kernels run on the CPU (for good)."""
    if _active:
        return
    from agentforge.evaluator import cuda_lookalike, native
    from torch.utils import cpp_extension

    native._torch_load_inline()  # torch's own, saved before any swap
    build.save_cpu_build(native.cached_load_inline)
    emulated = _record(build.load_inline_emulated)
    patches = [(native, "cached_load_inline", emulated), (cpp_extension, "load_inline", emulated),
               (cpp_extension, "load", _record(_load)), *cuda_lookalike.cuda_patches(arch),
               (torch.Tensor, "is_cuda", property(lambda self: self.device.type in ("cpu", "cuda")))]
    for owner, name, value in patches:
        setattr(owner, name, value)
    mode = CudaMeansCpu()
    mode.__enter__()
    _active.append(mode)
