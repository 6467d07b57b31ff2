"""The candidate worker's CUDA-looking machine for an emulated run: real CPU tensors, CUDA answers.

Entered once, for good, by a worker that serves an emulated CUDA job (it serves nothing else).
It is the one way a CUDA candidate runs without a GPU: one worker, one drive (the correctness
stage's), and every build the candidate attempts on the way judged twice:

* `torch.cuda` answers as one device of the job's architecture (the lookalike's patches);
* a device "cuda" anywhere (`.cuda()`, `.to("cuda")`, `device="cuda"` in a factory, a module's
  `.cuda()`) means the CPU, through a torch-function mode, and `Tensor.is_cuda` is true for CPU
  tensors, so the candidate's Python checks pass; its C++ checks pass through the source rewrite;
* every `load_inline` / `cpp_extension.load` / lean `native.load_cuda` is first the compile-only
  verdict's build (`cuda_lookalike`'s: nvcc and g++ with torch's own flags for the job's
  architecture, recorded in `native.BUILD_EVENTS`); one that fails raises to the candidate, as
  torch's build would, and nothing of it is emulated. One that compiled is then built for the
  emulation (`build`, its events kept apart in `EMULATION_EVENTS`), which executes the kernels on
  the CPU. A source that needs a GPU (`NeedsGpu`) or that the emulation cannot build is recorded
  (`NEEDS_GPU`, `EMULATION_FAILURES`) and answered with the lookalike's stand-in module, so the
  drive goes on to the builds after it; the judge then keeps the verdict and runs nothing. A lean
  `load_cuda` source is built as a plain library without torch's headers (`lean`), its module's
  kernels called as CuPy's are; `import cupy` gives a stand-in where CuPy is not installed.

`stop_reason` tells the worker when the drive has decided the build stage (a failed build, a
construct that cannot run here, a CUDA candidate that built no CUDA after its first call): the
correctness stage ends there and the judge reads the builds.

Runs only in the candidate worker: everything here executes candidate code.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch
from agentforge.evaluator.cuda_emulation import build, lean
from agentforge.evaluator.cuda_emulation.rewrite import NeedsGpu
from agentforge.evaluator.native import BUILD_EVENTS, BuildEvent
from torch.overrides import TorchFunctionMode

NEEDS_GPU: list[str] = []  # the GPU-only constructs met by the builds of this worker
EMULATION_FAILURES: list[str] = []  # builds nvcc made and the emulation could not
EMULATION_EVENTS: list[BuildEvent] = []  # the emulation's own builds (not the verdict's)
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


def _emulate(name: str, make: Any) -> Any:
    """The emulation's build of what nvcc just built; its events kept out of the verdict's."""
    from agentforge.evaluator.worker import cuda_lookalike

    before = len(BUILD_EVENTS)
    try:
        return make()
    except NeedsGpu as exc:
        NEEDS_GPU.append(str(exc))
    except Exception as exc:  # nvcc built it: the verdict stands, the kernels cannot run here
        EMULATION_FAILURES.append(f"{name}: {type(exc).__name__}: {str(exc)[:300]}")
    finally:
        EMULATION_EVENTS.extend(BUILD_EVENTS[before:])
        del BUILD_EVENTS[before:]
    return cuda_lookalike.ExtensionStandIn(name)


def _judged_load_inline(arch: str, torch_load_inline: Any) -> Any:
    """`load_inline`: the verdict's build (a failure raises to the candidate), then the emulation's."""
    from agentforge.evaluator.worker import cuda_lookalike

    verdict = cuda_lookalike.make_load_inline(arch)
    signature = inspect.signature(torch_load_inline)

    def load_inline(*args: Any, **kwargs: Any) -> Any:
        call = signature.bind(*args, **kwargs).arguments  # torch's own argument rules, by name
        verdict(**call)
        return _emulate(str(call["name"]), lambda: build.load_inline_emulated(**call))

    return load_inline


def _judged_load(arch: str) -> Any:
    """`cpp_extension.load(name, sources=[files])`: the verdict's build of the files, then the
    emulation's, the files read and built as `load_inline` sources."""
    from agentforge.evaluator.worker import cuda_lookalike

    verdict = cuda_lookalike.make_load(arch)

    def load(name: str, sources: Any, extra_cflags: Any = None, extra_cuda_cflags: Any = None,
             extra_ldflags: Any = None, extra_include_paths: Any = None, **kwargs: Any) -> Any:
        verdict(name, sources, extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths, **kwargs)
        paths = [Path(p) for p in ([sources] if isinstance(sources, str) else sources)]
        cuda = [p.read_text() for p in paths if p.suffix in CUDA_SUFFIXES]
        cpp = [p.read_text() for p in paths if p.suffix not in CUDA_SUFFIXES]
        includes = [*(extra_include_paths or []), *sorted({str(p.parent.resolve()) for p in paths})]
        return _emulate(name, lambda: build.load_inline_emulated(name, cpp, cuda, None, extra_cflags, includes))

    return load


def _judged_load_cuda(arch: str) -> Any:
    """The lean `native.load_cuda`: nvcc's verdict (a failure raises to the candidate), then the
    emulation's build of the same source, a module whose kernels run on the CPU (`lean`)."""
    from agentforge.evaluator.worker import cuda_lookalike

    verdict = cuda_lookalike.make_load_cuda(arch)

    def load_cuda(name: str, source: str, *args: Any, **kwargs: Any) -> Any:
        verdict(name, source, *args, **kwargs)
        return _emulate(name, lambda: lean.load_cuda_emulated(name, source))

    return load_cuda


def stop_reason(called: bool) -> str:
    """Why the drive should end here ("" when it goes on): a build failed (the verdict), a build
    cannot run here, or (`called`: a forward returned) a CUDA candidate built no CUDA code."""
    from agentforge.evaluator.worker import cuda_lookalike

    if any(not e.ok for e in BUILD_EVENTS):
        return "a build failed: the compile verdict decides"
    if NEEDS_GPU or EMULATION_FAILURES:
        return "a build cannot be executed by the CPU emulation: the compile verdict stands"
    if called and not cuda_lookalike.built_cuda(BUILD_EVENTS):
        return "forward returned and no CUDA code was built"
    return ""


def activate(arch: str) -> None:
    """Make this worker process a CUDA-looking machine whose kernels run on the CPU (for good)."""
    if _active:
        return
    from agentforge.evaluator import native
    from agentforge.evaluator.worker import cuda_lookalike
    from torch.utils import cpp_extension

    torch_load_inline = native._torch_load_inline()  # torch's own, saved before any swap
    build.save_cpu_build(native.cached_load_inline)
    judged = _judged_load_inline(arch, torch_load_inline)
    patches = [(native, "cached_load_inline", judged), (cpp_extension, "load_inline", judged),
               (cpp_extension, "load", _judged_load(arch)), (native, "load_cuda", _judged_load_cuda(arch)),
               *cuda_lookalike.cuda_patches(arch),
               (torch.Tensor, "is_cuda", property(lambda self: self.device.type in ("cpu", "cuda")))]
    for owner, name, value in patches:
        setattr(owner, name, value)
    lean.install_cupy_stand_in()  # a lean candidate's `import cupy` (streams, scalar types) without a GPU
    mode = CudaMeansCpu()
    mode.__enter__()
    _active.append(mode)
