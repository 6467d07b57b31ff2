"""A CUDA lookalike for compile-only verdicts: ModelNew built and driven without a GPU.

LLM-written KernelBench answers build their extensions wherever they like: in the module body,
in `__init__` behind `torch.cuda.is_available()`, or on the first `forward` behind `x.is_cuda`.
A verdict that only executes the module body never reaches most of them. So, in the candidate
worker of a compile-only job, the module executes, `ModelNew(*init)` is constructed and its
`forward` is called on the task's input shapes in an environment that looks like a CUDA machine
to the candidate and needs no device memory:

* `torch.cuda` answers as one device of the job's architecture (`is_available()`, the device's
  capability and properties, streams and events that do nothing);
* tensors are torch's fake tensors (`FakeTensorMode`): they report `is_cuda`, device `cuda:0`,
  shapes and dtypes, and hold no memory, so `.cuda()`, `.to("cuda")`, `torch.empty(...,
  device=x.device)` and the shape arithmetic of a forward all work;
* every build goes through torch's own build up to the link (`compile_only`): `load_inline`
  (CUDA or C++ sources), `cpp_extension.load` (source files) and the lean `native.load_cuda`.
  A build that succeeds returns a stand-in module; calling one of its functions is the kernel
  launch, which cannot happen here: it is recorded and returns an empty tensor shaped like its
  first tensor argument, so that forward goes on (to a later build, if there is one).

Whatever stops the drive after that (a launch's output with another shape, `.item()` on a fake
tensor, an API the lookalike lacks) is recorded as how far it got and does not count against the
candidate. What counts is every build it attempted: one that failed is the verdict whatever the
candidate did with the exception (`build_failure`), and a CUDA candidate that built no CUDA code
is told so (`built_cuda`).

That fake-tensor drive serves compile-only jobs. A job that runs in the CPU emulation drives the
candidate once, for real, in its correctness stage; each of its builds goes through the same
build stand-ins (`make_load_inline`, `make_load`, `make_load_cuda`) before the emulation's own
build (`cuda_emulation.environment`), and `build_report` reads the builds as `report` does.

Runs only in the candidate worker: everything here executes candidate code.
"""

from __future__ import annotations

import contextlib
import functools
import time
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from agentforge.evaluator import native, prepack
from agentforge.evaluator.native import BUILD_EVENTS, BuildError, BuildEvent, _as_list
from agentforge.evaluator.protocol.messages import Drive
from agentforge.evaluator.result import ErrorRecord, to_plain
from agentforge.evaluator.worker import api_drift, compile_only

CUDA_SUFFIXES = (".cu", ".cuh")
CUDA_KINDS = ("compile-only-nvcc", "lean-nvcc", "load_inline")
LAUNCHES: list[str] = []  # extension functions called during the drive (launches skipped)
_MISSING = object()


def _device() -> torch.device:
    return torch.device("cuda", 0)


# ----- the build stand-ins --------------------------------------------------------------------
class ExtensionStandIn(types.ModuleType):
    """What a build that succeeded returns: every function is a launch that is recorded, not run."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr in ("get_function", "get_kernel"):  # CuPy's RawModule, for the lean path
            return lambda name, *_: _launch(f"{self.__name__}.{name}")
        return _launch(f"{self.__name__}.{attr}")


def _launch(where: str) -> Any:
    def launch(*args: Any, **kwargs: Any) -> Any:
        LAUNCHES.append(where)
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        return None if first is None else torch.empty_like(first)

    return launch


def _record_failure(before: int, exc: BuildError) -> None:
    """The failed build's event carries the message and the log, whatever the candidate does next."""
    if len(BUILD_EVENTS) > before:
        event = BUILD_EVENTS[-1]
        event.ok = False
        event.error = event.error or str(exc)
        event.log = event.log or exc.log or str(exc)


def make_load_inline(arch: str) -> Any:
    """`load_inline` as torch's build up to the link; a stand-in module when it compiled."""
    capture = compile_only.make_capture(arch)

    def load_inline(name: str, cpp_sources: Any = (), cuda_sources: Any = None, functions: Any = None,
                    extra_cflags: Any = None, extra_cuda_cflags: Any = None, extra_ldflags: Any = None,
                    extra_include_paths: Any = None, **kwargs: Any) -> Any:
        before = len(BUILD_EVENTS)
        try:
            if _as_list(cuda_sources):
                with contextlib.suppress(compile_only.CompileOnlyStop):
                    capture(name, cpp_sources, cuda_sources, functions, extra_cflags, extra_cuda_cflags,
                            extra_ldflags, extra_include_paths, **kwargs)
            else:
                _cpp_only(name, _as_list(cpp_sources), functions, arch, extra_cflags, extra_ldflags,
                          extra_include_paths, kwargs)
        except BuildError as exc:
            _record_failure(before, exc)
            raise
        return ExtensionStandIn(name)

    return load_inline


def _cpp_only(name: str, cpp: list[str], functions: Any, arch: str, extra_cflags: Any, extra_ldflags: Any,
              extra_include_paths: Any, kwargs: dict[str, Any]) -> None:
    """A `load_inline` without CUDA sources: its main.cpp compiled by torch's build, as on a GPU."""
    started = time.perf_counter()
    event = BuildEvent("compile-only-cpp", name, False, 0.0, False, "", {"cpp": "\n".join(cpp)},
                       (*(extra_cflags or []), "|", *(extra_ldflags or [])))
    BUILD_EVENTS.append(event)
    options = {k: kwargs[k] for k in ("with_pytorch_error_handling", "with_cuda") if k in kwargs}
    verdict = compile_only.compile_inline_extension(name, cpp, [], functions, arch, extra_cflags or [], [],
                                                    extra_ldflags or [], extra_include_paths or [], **options)
    event.ok, event.seconds, event.cached, event.log = (verdict.ok, time.perf_counter() - started, verdict.cached,
                                                        verdict.log)
    if not verdict.ok:
        raise BuildError(verdict.message, verdict.log)


def make_load(arch: str) -> Any:
    """`cpp_extension.load(name, sources=[files])`: the files read and built as `load_inline` builds
    them, without its implicit headers or generated bindings (the sources bring their own)."""
    inline = make_load_inline(arch)

    def load(name: str, sources: Any, extra_cflags: Any = None, extra_cuda_cflags: Any = None,
             extra_ldflags: Any = None, extra_include_paths: Any = None, **kwargs: Any) -> Any:
        paths = [Path(p) for p in _as_list(sources)]
        cuda = [p.read_text() for p in paths if p.suffix in CUDA_SUFFIXES]
        cpp = [p.read_text() for p in paths if p.suffix not in CUDA_SUFFIXES]
        includes = [*(extra_include_paths or []), *sorted({str(p.parent.resolve()) for p in paths})]
        options = {k: kwargs[k] for k in ("with_pytorch_error_handling", "with_cuda") if k in kwargs}
        return inline(name, cpp, cuda or None, None, extra_cflags, extra_cuda_cflags, extra_ldflags, includes,
                      no_implicit_headers=True, **options)

    return load


def make_load_cuda(arch: str) -> Any:
    """The lean `native.load_cuda`: nvcc for the job's arch, then a stand-in for CuPy's module."""
    capture = compile_only.make_lean_capture(arch)

    def load_cuda(name: str, source: str, arch_override: str | None = None, extra_cuda_cflags: Any = (),
                  **kwargs: Any) -> Any:
        before = len(BUILD_EVENTS)
        try:
            with contextlib.suppress(compile_only.CompileOnlyStop):
                capture(name, source, arch_override, extra_cuda_cflags, **kwargs)
        except BuildError as exc:
            _record_failure(before, exc)
            raise
        return ExtensionStandIn(name)

    return load_cuda


# ----- torch.cuda as one device of the job's architecture -------------------------------------
class _Stream:
    """A stream that orders nothing (nothing runs)."""

    cuda_stream = 0
    device = property(lambda self: _device())

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait_stream(self, *_: Any) -> None:
        pass

    def wait_event(self, *_: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> Any:
        return event or _Event()

    def query(self) -> bool:
        return True

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *_: Any) -> None:
        pass


class _Event:
    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def record(self, *_: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait(self, *_: Any) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, *_: Any) -> float:
        return 0.0


class _Autocast:
    """`torch.autocast("cuda")` and `torch.cuda.amp.autocast()`: nothing to cast on fake tensors,
    and torch's own would ask a CPU-only build for a CUDA device guard, which aborts the process."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def __enter__(self) -> _Autocast:
        return self

    def __exit__(self, *_: Any) -> None:
        pass

    def __call__(self, fn: Any) -> Any:
        return fn


class _DeviceGuard:
    """`torch.cuda.device(...)`: one device, nothing to switch."""

    def __init__(self, *_: Any) -> None:
        pass

    def __enter__(self) -> _DeviceGuard:
        return self

    def __exit__(self, *_: Any) -> None:
        pass


def device_properties(arch: str) -> types.SimpleNamespace:
    """The properties a candidate may size its launch with: an H100 SXM's for sm_90/sm_90a (the
    default target), the architecture's capability with the same figures otherwise."""
    digits = arch.removeprefix("sm_").rstrip("af")
    major, minor = int(digits[:-1] or 0), int(digits[-1:] or 0)
    return types.SimpleNamespace(
        name=f"NVIDIA H100 80GB HBM3 (compile-only lookalike, {arch})", major=major, minor=minor,
        total_memory=80 * 2**30, multi_processor_count=132, max_threads_per_multi_processor=2048,
        max_threads_per_block=1024, warp_size=32, regs_per_multiprocessor=65536, L2_cache_size=50 * 2**20,
        shared_memory_per_block=48 * 1024, shared_memory_per_block_optin=227 * 1024,
        shared_memory_per_multiprocessor=228 * 1024, is_integrated=False, is_multi_gpu_board=False,
        uuid="00000000-0000-0000-0000-000000000000", gcnArchName="")


def _normalise(value: Any) -> Any:
    """"cuda" and torch.device("cuda") as cuda:0: a CPU-only torch asks its (absent) CUDA runtime
    for the current device otherwise."""
    if isinstance(value, str) and value.split(":")[0] == "cuda":
        return torch.device("cuda", int(value.split(":")[1]) if ":" in value else 0)
    if isinstance(value, torch.device) and value.type == "cuda" and value.index is None:
        return _device()
    return value


def _to_cuda(value: Any) -> bool:
    return isinstance(value, torch.device) and value.type == "cuda"


def _tensor_patches() -> list[tuple[Any, str, Any]]:
    original_to = torch.Tensor.to

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        args = tuple(_normalise(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = _normalise(kwargs["device"])
        if any(_to_cuda(a) for a in (*args, kwargs.get("device"))):
            with fake_mode():  # a real CPU tensor becomes a fake CUDA one: no memory, no copy
                return original_to(_fake(self), *args, **kwargs)
        return original_to(self, *args, **kwargs)

    def cuda(self: torch.Tensor, device: Any = None, non_blocking: bool = False, **_: Any) -> Any:
        target = _normalise(device) if device is not None else _device()
        if isinstance(target, int):
            target = torch.device("cuda", target)
        return to(self, target, non_blocking=non_blocking)

    original_module_to = torch.nn.Module.to

    def module_to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)
        if device is None or device.type != "cuda":
            return original_module_to(self, *args, **kwargs)
        return _module_to_cuda(self, dtype)

    def module_cuda(self: torch.nn.Module, device: Any = None) -> Any:
        return _module_to_cuda(self, None)

    return [(torch.Tensor, "to", to), (torch.Tensor, "cuda", cuda), (torch.nn.Module, "to", module_to),
            (torch.nn.Module, "cuda", module_cuda)]


def _module_to_cuda(model: torch.nn.Module, dtype: torch.dtype | None) -> torch.nn.Module:
    """Every parameter and buffer as a fake CUDA tensor, by hand: `Module._apply` would try to swap
    a real or CPU-fake parameter's storage with a fake one's, which fake tensors do not allow."""
    with fake_mode():
        for module in model.modules():
            for name, param in list(module._parameters.items()):
                if param is not None:
                    cast = dtype if dtype is not None and param.is_floating_point() else param.dtype
                    moved = _fake(param.detach()).to(device=_device(), dtype=cast)
                    module._parameters[name] = torch.nn.Parameter(moved, requires_grad=param.requires_grad)
            for name, buffer in list(module._buffers.items()):
                if buffer is not None:
                    cast = dtype if dtype is not None and buffer.is_floating_point() else buffer.dtype
                    module._buffers[name] = _fake(buffer).to(device=_device(), dtype=cast)
    return model


def _fake(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as a fake one (its metadata only)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return tensor if isinstance(tensor, FakeTensor) else fake_mode().from_tensor(tensor)


@functools.cache
def fake_mode() -> Any:
    """One fake-tensor mode per worker: tensors made in it report their device and shape and
    hold no memory; real tensors the candidate made earlier may enter it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def cuda_patches(arch: str) -> list[tuple[Any, str, Any]]:
    props = device_properties(arch)
    cuda = torch.cuda

    def nothing(*_: Any, **__: Any) -> None:
        return None
    values: dict[str, Any] = {
        "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0,
        "is_initialized": lambda: True, "_lazy_init": nothing, "init": nothing, "set_device": nothing,
        "get_device_capability": lambda *_: (props.major, props.minor),
        "get_device_name": lambda *_: props.name, "get_device_properties": lambda *_: props,
        "get_arch_list": lambda: [arch.rstrip("af")], "synchronize": nothing,
        "current_stream": lambda *_: _Stream(), "default_stream": lambda *_: _Stream(), "Stream": _Stream,
        "Event": _Event, "stream": lambda s=None: s if s is not None else _Stream(), "device": _DeviceGuard,
        "manual_seed": nothing, "manual_seed_all": nothing, "seed": nothing, "empty_cache": nothing,
        "memory_allocated": lambda *_: 0, "max_memory_allocated": lambda *_: 0,
        "mem_get_info": lambda *_: (props.total_memory, props.total_memory),
    }
    autocast_any = torch.autocast

    def autocast(device_type: str = "cuda", *args: Any, **kwargs: Any) -> Any:
        if str(device_type).startswith("cuda"):
            return _Autocast()
        return autocast_any(device_type, *args, **kwargs)

    return [(cuda, name, value) for name, value in values.items()] + [
        (torch.cuda.amp, "autocast", _Autocast), (torch, "autocast", autocast), (torch.amp, "autocast", autocast)]


def _build_patches(arch: str) -> list[tuple[Any, str, Any]]:
    from torch.utils import cpp_extension

    native._torch_load_inline()  # torch's own, saved before the swap: the build goes through it
    return [(cpp_extension, "load_inline", make_load_inline(arch)), (cpp_extension, "load", make_load(arch)),
            (native, "load_cuda", make_load_cuda(arch))]


@functools.cache
def _warm_up() -> None:
    """torch's lazy imports behind fake tensors (dynamo's tables of torch functions among them) done
    once with torch.cuda as it is: done later they would index the stand-ins."""
    with fake_mode(), torch.no_grad():
        x = torch.empty(2, 2, device=_device())
        torch.nn.functional.linear(x, x).to(_device()).sum()


@contextlib.contextmanager
def active(arch: str, fake: bool = False) -> Iterator[None]:
    """The lookalike, for the candidate code run inside (`fake`: with the fake-tensor mode on, so
    that factories with device="cuda" work). Everything is restored on the way out, so the
    worker's own checks see torch as it was."""
    _warm_up()
    patches = [*_build_patches(arch), *cuda_patches(arch), *_tensor_patches()]
    saved = [(owner, name, owner.__dict__.get(name, _MISSING) if isinstance(owner, type) else
              getattr(owner, name, _MISSING)) for owner, name, _ in patches]
    for owner, name, value in patches:
        setattr(owner, name, value)
    try:
        with fake_mode() if fake else contextlib.nullcontext():
            yield
    finally:
        for owner, name, value in reversed(saved):
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


# ----- the drive --------------------------------------------------------------------------------
def _make_input(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"__empty__"}:
        shape, dtype = value["__empty__"]
        return torch.empty(shape, dtype=getattr(torch, dtype), device=_device())
    return value


def _construct(model_cls: type, init: list[Any]) -> Any:
    """ModelNew(*init) with fake weights (no memory); an `__init__` that reads its weights' values
    is retried with real ones on the CPU, unless a build already happened in the first try."""
    before = len(BUILD_EVENTS)
    try:
        with fake_mode():
            return model_cls(*init)
    except BuildError:
        raise
    except Exception:
        if len(BUILD_EVENTS) > before:
            raise
    return model_cls(*init)


def drive(model_cls: type | None, init: list[Any], inputs: list[Any], arch: str) -> dict[str, str]:
    """Construct ModelNew and call forward under the lookalike. Returns how far it got: `reached`
    (module, construct or forward) and `stopped` (what stopped it, "" when forward returned)."""
    reached, stopped = "module", ""
    LAUNCHES.clear()
    if model_cls is None:
        return {"reached": reached, "stopped": "no ModelNew"}
    with active(arch), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fake tensors' data_ptr() warns: the pointer is never used
        try:
            model = _construct(model_cls, init)
            reached = "construct"
            with fake_mode(), torch.no_grad():
                if isinstance(model, torch.nn.Module):
                    model = _module_to_cuda(model, None).eval()
                    with contextlib.suppress(Exception):  # as the worker does once the weights are loaded;
                        prepack.prepare(model)  # what the lookalike cannot run there leaves forward to say
                model(*[_make_input(v) for v in inputs])
            reached = "forward"
        except Exception as exc:  # past the builds: what cannot run here is not the candidate's fault
            stopped = f"{'ModelNew(...)' if reached == 'module' else 'forward'}: {type(exc).__name__}: {exc}"[:500]
    return {"reached": reached, "stopped": stopped}


# ----- what the builds say ------------------------------------------------------------------------
def built_cuda(events: list[BuildEvent]) -> bool:
    """Whether any CUDA source was compiled (successfully)."""
    return any(e.ok and e.kind in CUDA_KINDS and e.sources.get("cuda") for e in events)


def build_failure(events: list[BuildEvent]) -> ErrorRecord | None:
    """The first build that failed, as the verdict's error: the build's message with the compiler's
    first error, and a note for each API drift recognised in it (see `api_drift`)."""
    from agentforge.evaluator.worker.loading import keep_first_error

    failed = next((e for e in events if not e.ok), None)
    if failed is None:
        return None
    first = api_drift.first_error(failed.log)
    message = failed.error or f"the build of {failed.name} failed"
    if first and first not in message:
        message += f": {first}"
    notes = api_drift.explain(failed.log, "\n".join(failed.sources.get(k, "") for k in ("cpp", "cuda")))
    if len(events) > 1:
        message += f" (build {events.index(failed) + 1} of {len(events)})"
    return ErrorRecord(type="BuildError", message="\n".join([message, *notes])[:2000],
                       traceback_tail=keep_first_error(failed.log))


def report(model_cls: type | None, request: Drive) -> dict[str, Any]:
    """The worker's answer to the judge's `drive` request: the drive, then every build of the
    candidate's (module body included) as one compile record."""
    progress = drive(model_cls, list(request.init), list(request.inputs), request.arch)
    return build_report(request.backend, request.arch, progress, LAUNCHES[:50])


def build_report(backend: str, arch: str, progress: dict[str, str], launches: list[str] | None = None,
                 ) -> dict[str, Any]:
    """Every build the candidate attempted so far (`BUILD_EVENTS`: the compile-only builds) as one
    compile record, with how far the drive got (`progress`: reached, stopped) and the launches it
    skipped (none where the kernels ran)."""
    from agentforge.evaluator import integrity
    from agentforge.evaluator.worker.loading import _compile_record

    events = list(BUILD_EVENTS)
    failure = build_failure(events)
    record = _compile_record(backend, ok=failure is None, compile_only=True, arch=arch)
    return {"compile": to_plain(record), "error": to_plain(failure) if failure else None,
            "compile_failed": failure is not None, "cuda_built": built_cuda(events), "builds": len(events),
            "launches": list(launches or []), "reached": progress["reached"], "stopped": progress["stopped"],
            "build_findings": [[f.rule, f.evidence] for f in integrity.build_findings(events)]}
