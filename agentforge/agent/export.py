"""`export_run(run, runs_dir, to)`: a run's best kernel as a package a user imports into a model.

The package registers the kernel as a `torch.library` custom op, `agentforge::<op>`, taking the
task's inputs and the kernel module's state as lists of tensors (and which module, by slot) and
returning one tensor. Its fake (meta) implementation runs the task's reference `Model` on meta
tensors, so shapes and dtypes are known without running the kernel: `torch.compile` traces the op
as one node of its graph instead of breaking the graph at an opaque call. Layout, under `<to>/<package>/`:

    __init__.py    registers the op; `Module(*init_inputs)` calls it with its own weights,
                   `<op>(*inputs)` with a module built from the task's `get_init_inputs()`
    _kernel.py     the best kernel, verbatim (KernelBench answer format: `ModelNew`)
    _reference.py  the task file, verbatim (the fake implementation and the example use it)
    example.py     a 10-line usage example: inside torch.compile, checked against the task's Model
    EXPORT.json    where it came from: run, task, code hash, measured speedups, device

Nothing here imports the kernel or the task: exporting writes files; the user's import builds
the kernel (a CPU kernel through `agentforge.evaluator.native`, so agentforge must be installed
where it is imported). A `Module` passes its kernel's parameters and buffers to the op on every
call (`torch.func.functional_call`), so weights loaded into it are the ones used, and under
torch.compile they are graph inputs like any layer's. The op is for inference: it has no backward.
"""

from __future__ import annotations

import hashlib
import json
import keyword
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAMESPACE = "agentforge"


class ExportError(RuntimeError):
    """A run that cannot be exported; the message says why and what to do."""


@dataclass(frozen=True)
class Exported:
    package: Path  # the package folder
    op: str  # the qualified op name, e.g. agentforge::relu
    function: str  # the package's function that calls it
    example: str  # the usage example's text


def export_run(run: str, runs_dir: str | Path, to: str | Path, name: str | None = None) -> Exported:
    """Write the best kernel of `run` (a run id under `runs_dir`, or a run folder) as a package
    under `to`; ExportError when the run has no correct kernel or its task file is gone."""
    run_dir = find_run(run, runs_dir)
    meta = json.loads((run_dir / "run.json").read_text())
    kernel_file = run_dir / "best_kernel.py"
    if not kernel_file.is_file():
        raise ExportError(f"run {meta['run_id']} has no correct kernel to export (see {run_dir / 'report.md'}; "
                          f"a run still in progress or awaiting review writes best_kernel.py when it finishes)")
    task_source = _task_source(meta)
    op = op_name(meta["task_name"])
    package = Path(to).expanduser() / (name or f"{op}_kernel")
    if not package.name.isidentifier() or keyword.iskeyword(package.name):
        raise ExportError(f"{package.name!r} is not a Python package name: choose one with --name")
    summary = _read_json(run_dir / "summary.json")
    best = summary.get("best") or {}
    provenance = {
        "run_id": meta["run_id"], "task_name": meta["task_name"], "task_hash": meta["task_hash"],
        "backend": meta["backend"], "device": meta.get("device_spec") or meta.get("device"),
        "code_hash": best.get("code_hash"), "round": best.get("round"), "speedup_vs_eager": best.get("speedup"),
        "speedup_vs_compile": best.get("speedup_vs_compile"), "op": f"{NAMESPACE}::{op}",
    }
    values = {"package": package.name, "op": op, "namespace": NAMESPACE, "task": meta["task_name"],
              "run_id": meta["run_id"], "speedup": _x(best.get("speedup")), "backend": meta["backend"]}
    example = string.Template(_EXAMPLE).substitute(values)
    package.mkdir(parents=True, exist_ok=True)
    (package / "_kernel.py").write_text(kernel_file.read_text())
    (package / "_reference.py").write_text(task_source)
    (package / "__init__.py").write_text(string.Template(_INIT).substitute(values))
    (package / "example.py").write_text(example)
    (package / "EXPORT.json").write_text(json.dumps(provenance, indent=1) + "\n")
    return Exported(package=package, op=f"{NAMESPACE}::{op}", function=op, example=example)


def find_run(run: str, runs_dir: str | Path) -> Path:
    """The folder of a run given by path or by id under `runs_dir`."""
    for candidate in (Path(run).expanduser(), Path(runs_dir).expanduser() / run):
        if (candidate / "run.json").is_file():
            return candidate
    raise ExportError(f"no run {run!r}: neither a run folder nor a run id under {runs_dir} "
                      "(name the folder, or set --runs to where the run lives)")


def op_name(task_name: str) -> str:
    """A Python identifier for the task's op: `level2/add_mul_relu` -> `add_mul_relu`."""
    slug = re.sub(r"\W+", "_", task_name.rsplit("/", 1)[-1]).strip("_").lower() or "kernel"
    return f"op_{slug}" if slug[0].isdigit() or keyword.iskeyword(slug) else slug


def _task_source(meta: dict[str, Any]) -> str:
    path = Path(meta["task_ref"]).expanduser()
    if not path.is_file():
        raise ExportError(f"the task file {path} of run {meta['run_id']} is gone: the package needs its "
                          "reference Model (restore the file, then export again)")
    source = path.read_text()
    if hashlib.sha256(source.encode()).hexdigest()[:16] != meta["task_hash"]:
        raise ExportError(f"the task file {path} changed since run {meta['run_id']}: the kernel was checked "
                          "against the old one (restore it, or optimise the new one)")
    return source


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {}


def _x(value: float | None) -> str:
    return f"{value:.2f}x vs eager" if value else "speedup not measured"


# The generated package's __init__.py. `$name` fields are filled by export_run.
_INIT = '''"""$task as the custom op `$namespace::$op`, exported by agentforge from run $run_id
($speedup, $backend backend). See example.py; EXPORT.json says where it came from.

    import $package
    y = $package.$op(*inputs)                   # the task's own init inputs, eager or compiled
    layer = $package.Module(*init_inputs)       # a module whose weights are yours to load
"""

from __future__ import annotations

import torch

from . import _kernel, _reference

OP = "$namespace::$op"
# Each Module's kernel instance, and its reference on the meta device (shapes and dtypes only, for
# the fake implementation), by slot: a custom op takes tensors and numbers, not modules.
_KERNELS: list[torch.nn.Module] = []
_META: list[torch.nn.Module] = []


def _register(kernel: torch.nn.Module, init_inputs: tuple) -> int:
    with torch.device("meta"):
        _META.append(_reference.Model(*init_inputs))
    _KERNELS.append(kernel)
    return len(_KERNELS) - 1


def _state(module: torch.nn.Module) -> tuple[list[str], list[torch.Tensor]]:
    named = [*module.named_parameters(), *module.named_buffers()]
    return [n for n, _ in named], [t for _, t in named]


@torch.library.custom_op(OP, mutates_args=())
def _op(inputs: list[torch.Tensor], state: list[torch.Tensor], slot: int) -> torch.Tensor:
    kernel = _KERNELS[slot]
    names, _ = _state(kernel)
    out = torch.func.functional_call(kernel, dict(zip(names, state, strict=True)), tuple(inputs))
    # A custom op's output may not be one of its inputs.
    return out.clone() if any(out is x for x in (*inputs, *state)) else out


@_op.register_fake
def _(inputs: list[torch.Tensor], state: list[torch.Tensor], slot: int) -> torch.Tensor:
    # The reference's own weights are swapped for fresh meta tensors: under torch.compile every
    # tensor here must come from the tracer's fake mode, and a factory call makes one.
    reference = _META[slot]
    weights = {n: torch.empty(t.shape, dtype=t.dtype, device="meta")
               for n, t in [*reference.named_parameters(), *reference.named_buffers()]}
    metas = tuple(torch.empty_like(x, device="meta") for x in inputs)
    out = torch.func.functional_call(reference, weights, metas)
    return inputs[0].new_empty(out.shape, dtype=out.dtype)


class Module(torch.nn.Module):
    """The kernel as a module built like the task's Model (same constructor arguments); its
    parameters and buffers (`kernel.*`) are passed to the op on every call, so loaded weights count."""

    def __init__(self, *init_inputs):
        super().__init__()
        self.kernel = _kernel.ModelNew(*init_inputs)
        self.slot = _register(self.kernel, init_inputs)

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return _op(list(inputs), _state(self.kernel)[1], self.slot)

    def load_weights(self, model: torch.nn.Module) -> Module:
        """Take `model`'s weights where name and shape match, as the evaluator gave the kernel
        the reference Model's when it checked it."""
        own = self.kernel.state_dict()
        self.kernel.load_state_dict({k: v for k, v in model.state_dict().items()
                                     if k in own and own[k].shape == v.shape}, strict=False)
        return self


# Built at import, not on first call: a compiled function calling $op must find it ready.
_default = Module(*_reference.get_init_inputs())


def $op(*inputs: torch.Tensor) -> torch.Tensor:
    """The task's Model.forward(*inputs) by the exported kernel, built with the task's init inputs."""
    return _default(*inputs)
'''

# The usage example written beside it: the kernel given Model's weights, compiled, checked.
_EXAMPLE = '''"""Use the exported $task kernel inside a torch.compile'd module, checked against Model."""
import torch

import $package
from $package import _reference as task

reference = task.Model(*task.get_init_inputs())
fast = $package.Module(*task.get_init_inputs()).load_weights(reference)  # Model's weights, as when checked
inputs = task.get_inputs()
with torch.no_grad():  # inference only: the op has no backward
    out = torch.compile(fast, fullgraph=True)(*inputs)  # the op stays one node of the graph
torch.testing.assert_close(out, reference(*inputs), rtol=1e-2, atol=1e-2)  # KernelBench's tolerance
print("$namespace::$op matches the reference:", tuple(out.shape))
'''
