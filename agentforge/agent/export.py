"""`export_run(run, runs_dir, to)`: a run's best kernel as a package a user imports into a model.

The package registers the kernel as a `torch.library` custom op, `agentforge::<op>`, taking the
task's inputs as a list of tensors and returning one tensor. Its fake (meta) implementation runs
the task's reference `Model` on meta tensors, so shapes and dtypes are known without running the
kernel: `torch.compile` traces the op as one node of its graph instead of breaking the graph at an
opaque call. Layout, under `<to>/<package>/`:

    __init__.py    registers the op; `<op>(*inputs)` calls it, `Module` wraps it as an nn.Module
    _kernel.py     the best kernel, verbatim (KernelBench answer format: `ModelNew`)
    _reference.py  the task file, verbatim (the fake implementation and the example use it)
    example.py     a 10-line usage example: inside torch.compile, checked against the task's Model
    EXPORT.json    where it came from: run, task, code hash, measured speedups, device

Nothing here imports the kernel or the task: exporting writes files; the user's import builds
the kernel (a CPU kernel through `agentforge.evaluator.native`, so agentforge must be installed
where it is imported). The kernel module is built once, with the task's `get_init_inputs()`, and
serves every call: right for stateless operations; a module with weights keeps the ones it was
built with.
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
    y = $package.$op(*inputs)    # eager, or inside a torch.compile'd function: one graph node
"""

from __future__ import annotations

import torch

from . import _kernel, _reference

OP = "$namespace::$op"

# The fake implementation's reference, built once on the meta device: shapes and dtypes only.
with torch.device("meta"):
    _META_MODEL = _reference.Model(*_reference.get_init_inputs())
_model: torch.nn.Module | None = None


def _kernel_module() -> torch.nn.Module:
    """The kernel's ModelNew, built once with the task's init inputs (its build is cached)."""
    global _model
    if _model is None:
        _model = _kernel.ModelNew(*_reference.get_init_inputs())
    return _model


@torch.library.custom_op(OP, mutates_args=())
def _op(inputs: list[torch.Tensor]) -> torch.Tensor:
    out = _kernel_module()(*inputs)
    # A custom op's output may not be one of its inputs.
    return out.clone() if any(out is x for x in inputs) else out


@_op.register_fake
def _(inputs: list[torch.Tensor]) -> torch.Tensor:
    metas = [torch.empty_like(x, device="meta") for x in inputs]
    out = _META_MODEL(*metas)
    return inputs[0].new_empty(out.shape, dtype=out.dtype)


def $op(*inputs: torch.Tensor) -> torch.Tensor:
    """The task's Model.forward(*inputs), computed by the exported kernel."""
    return _op(list(inputs))


class Module(torch.nn.Module):
    """The op as a module, to drop in where the task's Model was used."""

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return $op(*inputs)
'''

# The 10-line usage example written beside it.
_EXAMPLE = '''"""Use the exported $task kernel inside a torch.compile'd function, checked against Model."""
import torch

import $package
from $package import _reference as task

inputs = task.get_inputs()
expected = task.Model(*task.get_init_inputs())(*inputs)
compiled = torch.compile(lambda *xs: $package.$op(*xs), fullgraph=True)  # the op stays one node
torch.testing.assert_close(compiled(*inputs), expected, rtol=1e-4, atol=1e-4)
print("$namespace::$op matches the reference:", tuple(expected.shape))
'''
