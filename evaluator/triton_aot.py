"""Compile the Triton kernels a candidate launched (under the interpreter) for a GPU that is not
here: the sm_90a verdict and ptxas's resource report, without a GPU.

`LaunchLog` records each distinct launch while the interpreter runs the candidate: the kernel's
name, every argument's Triton type (`*bf16`, `i32`, ...), its constexpr values and its launch
options. `compile_launches` then compiles each one in a fresh Python process with the interpreter
off (so that Triton's own helpers are the compiler's, not the interpreter's): Triton lowers the
kernel to PTX for the target, and the bundled `ptxas -v` reports registers, shared memory, stack
and spills, exactly as for a CUDA kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

AOT_TIMEOUT_S = 300
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")
_TORCH_TYPES = {
    "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32", "torch.float64": "fp64",
    "torch.int8": "i8", "torch.uint8": "u8", "torch.int16": "i16", "torch.int32": "i32", "torch.int64": "i64",
    "torch.bool": "i1", "torch.float8_e4m3fn": "fp8e4nv", "torch.float8_e5m2": "fp8e5",
}


@dataclass
class LaunchLog:
    """The distinct Triton launches seen while this log was active (specs as plain dicts)."""

    specs: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)

    def add(self, fn: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        try:
            spec = launch_spec(fn, args, kwargs)
        except Exception as exc:  # a launch we cannot type is reported, not fatal
            self.problems.append(f"{getattr(fn, '__name__', fn)}: {exc}")
            return
        self.add_spec(spec)

    def add_spec(self, spec: dict[str, Any]) -> None:
        key = json.dumps(spec, sort_keys=True)
        if key not in self._seen:
            self._seen.add(key)
            self.specs.append(spec)


@contextlib.contextmanager
def capture(execute: bool = True) -> Iterator[LaunchLog]:
    """Record every interpreted launch (`kernel[grid](...)`) made inside the block; with
    `execute=False` the launches are only recorded (a dry run of the host code on shapes too large
    for the interpreter, to compile the configurations a GPU would launch there)."""
    from torch.utils._python_dispatch import _disable_current_modes
    from triton.runtime.interpreter import InterpretedFunction

    log = LaunchLog()
    original = InterpretedFunction.run

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        if not warmup:
            log.add(self.fn, args, kwargs)
        if not execute:
            return None
        # The interpreter moves the launch's tensors through numpy with aten::copy_: the
        # evaluator's operator recorder must not count that as the candidate's PyTorch compute.
        # (Anything else run inside a kernel body, PyTorch included, cannot compile for the GPU,
        # and compile_launches rejects it.)
        from agentforge.evaluator.op_observer import HARNESS_WINDOW
        from torch.profiler import record_function

        with _disable_current_modes(), record_function(HARNESS_WINDOW):
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)

    InterpretedFunction.run = run
    try:
        yield log
    finally:
        InterpretedFunction.run = original


def launch_spec(fn: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """A JSON-able description of one launch: what `triton.compile` needs to rebuild it."""
    params = list(inspect.signature(fn).parameters.values())
    bound = dict(zip([p.name for p in params], args, strict=False))
    bound.update({k: v for k, v in kwargs.items() if k not in LAUNCH_OPTIONS})
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    divisible: list[str] = []
    for p in params:
        if p.name not in bound:
            if p.default is inspect.Parameter.empty:
                raise ValueError(f"argument {p.name!r} not given")
            value = p.default
        else:
            value = bound[p.name]
        if _is_constexpr(p.annotation) or value is None:
            signature[p.name] = "constexpr"
            constexprs[p.name] = _plain(value)
            continue
        kind, key = _specialise(value)
        signature[p.name] = kind
        if kind == "constexpr":  # an integer equal to 1, as the JIT specialises it
            constexprs[p.name] = _plain(value)
        elif key == "D":
            divisible.append(p.name)
    options = {k: kwargs[k] for k in LAUNCH_OPTIONS if k in kwargs}
    return {"kernel": fn.__name__, "signature": signature, "constexprs": constexprs, "divisible": divisible,
            "options": options}


def _is_constexpr(annotation: Any) -> bool:
    if annotation is inspect.Parameter.empty:
        return False
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    return "constexpr" in str(text)


def _plain(value: Any) -> Any:
    if hasattr(value, "value") and type(value).__name__ == "constexpr":
        value = value.value
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"constexpr of type {type(value).__name__} cannot be recorded")


def _triton_type(value: Any) -> str:
    if hasattr(value, "data_ptr") and hasattr(value, "dtype"):
        name = _TORCH_TYPES.get(str(value.dtype))
        if name is None:
            raise TypeError(f"tensor dtype {value.dtype} has no Triton type here")
        return "*" + name
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"argument of type {type(value).__name__} cannot be typed")


def _specialise(value: Any) -> tuple[str, str | None]:
    """(Triton type, specialisation key) exactly as Triton's JIT computes them for a GPU launch:
    pointers aligned to 16 bytes and integers divisible by 16 get "D" (tt.divisibility = 16), an
    integer equal to 1 becomes a constexpr, floats and bools are not specialised. Without this,
    the ahead-of-time build would compile slower code (no vector loads, no wgmma pipelining on
    unit strides) than the GPU would run."""
    try:
        from triton._C.libtriton import native_specialize_impl
        from triton.backends.compiler import BaseBackend
    except ImportError:
        native_specialize_impl = None
    no_specialising = isinstance(value, bool | float)
    if native_specialize_impl is not None:
        kind, key = native_specialize_impl(BaseBackend, value, False, not no_specialising, True)[:2]
        return kind, key if isinstance(key, str) else None
    kind = _triton_type(value)
    if hasattr(value, "data_ptr"):
        return kind, "D" if value.data_ptr() % 16 == 0 else ""
    if no_specialising:
        return kind, None
    if value == 1:
        return "constexpr", None
    return kind, "D" if value % 16 == 0 else ""


# ----- dry launches: the shapes too large for the interpreter -----------------------------------
DRY_LAUNCH_MAX_ELEMENTS = 1 << 29  # inputs and weights of a shape variant, allocated on the CPU


def dry_launch(task: Any, model_cls: type, checked: list[str], device: Any, log: LaunchLog) -> list[str]:
    """Run ModelNew's host code on the shape variants not checked in the interpreter with its
    launches recorded into `log` but not executed, so that the compile also covers the tiles,
    stages and specialisations a GPU would launch there (the headline shape above all). Outputs
    are garbage and ignored; a host path that fails this way is noted, never a verdict."""
    import torch
    from agentforge.evaluator.models import build_models

    notes = []
    for shape in [s for s in task.shapes if s not in checked]:
        numel = task.input_numel(shape)
        if numel is None or numel > DRY_LAUNCH_MAX_ELEMENTS:
            notes.append(f"{shape}: not dry-launched ({numel} elements)")
            continue
        try:
            with torch.no_grad(), capture(execute=False) as dry:
                _, candidate = build_models(task, model_cls, shape, 0, device)
                candidate(*task.make_inputs(1, shape, device))
        except Exception as exc:
            notes.append(f"{shape}: host code failed without kernel results ({type(exc).__name__}: {str(exc)[:200]})")
            continue
        for spec in dry.specs:
            log.add_spec(spec)
    return notes


def kernel_resources(report: dict[str, Any]) -> tuple:
    """The KernelResources of every kernel `compile_launches` built (ptxas's report)."""
    from agentforge.evaluator.hardware.compile_report import parse_ptxas
    from agentforge.evaluator.result import KernelResources

    found = []
    for kernel in report["kernels"]:
        if not kernel["ok"]:
            continue
        for res in parse_ptxas(kernel.get("ptxas_log") or "") or (KernelResources(name=kernel["name"]),):
            # Triton's shared memory is dynamic: ptxas sees only the static part.
            shared = max(res.shared_bytes or 0, kernel.get("shared_bytes") or 0)
            found.append(dataclasses.replace(res, name=kernel["name"], shared_bytes=shared))
    return tuple(found)


# ----- compiling, in a fresh process ---------------------------------------------------------
def compile_launches(source: str, specs: list[dict[str, Any]], arch: str = "sm_90a",
                     timeout_s: float = AOT_TIMEOUT_S) -> dict[str, Any]:
    """{"ok": bool, "kernels": [{"name", "ok", "error", "shared_bytes", "ptxas_log", "num_warps",
    "num_stages", "wgmma"}], "log": str}: each spec compiled for `arch` in a child process."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    payload = json.dumps({"source": source, "specs": specs, "arch": arch})
    try:
        done = subprocess.run([sys.executable, "-m", "agentforge.evaluator.triton_aot"], input=payload,
                              capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "kernels": [], "log": f"ahead-of-time compile ran past {timeout_s:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"ok": False, "kernels": [], "log": (done.stderr or done.stdout)[-4000:]}
    report = json.loads(lines[-1])
    report["ok"] = bool(report["kernels"]) and all(k["ok"] for k in report["kernels"])
    return report


def _child_main() -> None:
    request = json.loads(sys.stdin.read())
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    # From a real file: Triton reads each kernel's source with inspect.getsource.
    workdir = tempfile.mkdtemp(prefix="agentforge-aot-")
    path = Path(workdir) / "agentforge_aot_candidate.py"
    path.write_text(request["source"])
    spec = importlib.util.spec_from_file_location("agentforge_aot_candidate", path)
    assert spec is not None and spec.loader is not None
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = loaded
    with contextlib.redirect_stdout(sys.stderr):
        spec.loader.exec_module(loaded)
    module = vars(loaded)
    capability = int("".join(ch for ch in request["arch"] if ch.isdigit()))
    target = GPUTarget("cuda", capability, 32)
    kernels = []
    for spec in request["specs"]:
        entry: dict[str, Any] = {"name": spec["kernel"], "ok": False, "error": None, "options": spec["options"]}
        try:
            fn = module[spec["kernel"]]
            names = list(spec["signature"])
            attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in spec["divisible"]}
            src = ASTSource(fn=fn, signature=spec["signature"], constexprs=spec["constexprs"], attrs=attrs)
            with contextlib.redirect_stdout(sys.stderr):
                compiled = triton.compile(src, target=target, options=dict(spec["options"]))
            entry.update(ok=True, shared_bytes=compiled.metadata.shared, num_warps=compiled.metadata.num_warps,
                         num_stages=compiled.metadata.num_stages,
                         wgmma="wgmma.mma_async" in compiled.asm.get("ptx", ""),
                         ptxas_log=_ptxas_report(compiled.asm["ptx"], request["arch"]))
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:1500]}"
        kernels.append(entry)
    print(json.dumps({"kernels": kernels, "triton": triton.__version__}))


def _ptxas_report(ptx: str, arch: str) -> str:
    """`ptxas -v` on the PTX Triton produced, with the ptxas Triton itself uses for `arch`."""
    ptxas = _triton_ptxas(arch)
    if ptxas is None:
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        done = subprocess.run([ptxas, f"-arch={arch}", "-v", str(path), "-o", str(Path(tmp) / "kernel.cubin")],
                              capture_output=True, text=True, timeout=120)
    return (done.stdout + done.stderr)[-4000:]


def _triton_ptxas(arch: str) -> str | None:
    try:
        from triton.backends.nvidia.compiler import get_ptxas
    except ImportError:
        return None
    capability = int("".join(ch for ch in arch if ch.isdigit()))
    with contextlib.suppress(Exception):
        return get_ptxas(capability).path
    return None


if __name__ == "__main__":
    _child_main()
