"""`export_run(run, runs_dir, to)`: a run's best kernel as a package a user imports into a model.

The package registers the kernel as a `torch.library` custom op, `agentforge::<op>`, taking the
task's inputs and the kernel module's state as lists of tensors (and which module, by slot) and
returning the Model's outputs as a list of tensors; the package's `Module` and `<op>()` give them
back in the structure the Model returns (a tensor, or a tuple or list of them). Its fake (meta)
implementation runs the task's reference `Model` on meta tensors, so shapes and dtypes are known
without running the kernel: `torch.compile` traces the op as one node of its graph instead of
breaking the graph at an opaque call. Layout, under `<to>/<package>/`:

    __init__.py    registers the op; `Module(*init_inputs)` calls it with its own weights,
                   `<op>(*inputs)` with a module built from the task's `get_init_inputs()`;
                   `inputs()` and `reference()` make the task's inputs and Model at the shape the
                   run timed, in the task's dtype, as the evaluator made them
    _kernel.py     the best kernel, verbatim (KernelBench answer format: `ModelNew`)
    _reference.py  the task file, verbatim (the fake implementation and the example use it)
    example.py     a short usage example: inside torch.compile, checked against the task's Model;
                   it runs as `python -m <package>.example` and as `python <package>/example.py`
    EXPORT.json    where it came from: run, task, code hash, timed shape, measured speedups, device

Nothing here imports the kernel or the task: exporting writes files; the user's import builds
the kernel (a CPU kernel through `agentforge.evaluator.native`, so agentforge must be installed
where it is imported) and learns the Model's output structure from the reference on the meta
device. A `Module` passes its kernel's parameters and buffers to the op on every call
(`torch.func.functional_call`), so weights loaded into it are the ones used, and under
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

from agentforge.agent.report import device_text

NAMESPACE = "agentforge"
DEFAULT_SHAPE = "default"


class ExportError(RuntimeError):
    """A run that cannot be exported; the message says why and what to do."""


@dataclass(frozen=True)
class Exported:
    package: Path  # the package folder
    op: str  # the qualified op name, e.g. agentforge::relu
    function: str  # the package's function that calls it
    example: str  # the usage example's text
    shape: str  # the task's shape variant the package's inputs() and reference() use (the timed one)
    speedup: str  # the measured speedup, in words


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
    shape = timed_shape(summary, task_source)
    provenance = {
        "run_id": meta["run_id"], "task_name": meta["task_name"], "task_hash": meta["task_hash"],
        "backend": meta["backend"], "device": device_text(meta.get("device_spec") or meta.get("device") or ""),
        "code_hash": best.get("code_hash"), "round": best.get("round"), "shape": shape,
        "speedup_vs_eager": best.get("speedup"), "speedup_vs_compile": best.get("speedup_vs_compile"),
        "op": f"{NAMESPACE}::{op}",
    }
    values = {"package": package.name, "op": op, "namespace": NAMESPACE, "task": meta["task_name"],
              "run_id": meta["run_id"], "speedup": _x(best.get("speedup")), "backend": meta["backend"],
              "shape": shape, "device": "cuda" if meta["backend"] in ("cuda", "triton") else "cpu",
              "tolerances": repr(_default_tolerances())}
    example = string.Template(_EXAMPLE).substitute(values)
    package.mkdir(parents=True, exist_ok=True)
    (package / "_kernel.py").write_text(kernel_file.read_text())
    (package / "_reference.py").write_text(task_source)
    (package / "__init__.py").write_text(string.Template(_INIT).substitute(values))
    (package / "example.py").write_text(example)
    (package / "EXPORT.json").write_text(json.dumps(provenance, indent=1) + "\n")
    return Exported(package=package, op=f"{NAMESPACE}::{op}", function=op, example=example, shape=shape,
                    speedup=values["speedup"])


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


def timed_shape(summary: dict[str, Any], task_source: str) -> str:
    """The shape variant the run timed its best kernel on, when the task declares it (a hidden shape
    the evaluator derived is not in the file), else the task's default sizes."""
    from agentforge.task import declared_shape_names

    shape = (summary.get("best_measurement") or {}).get("shape") or DEFAULT_SHAPE
    return shape if shape in (declared_shape_names(task_source) or ()) else DEFAULT_SHAPE


def _default_tolerances() -> dict[str, tuple[float, float]]:
    from agentforge.task import DEFAULT_TOLERANCES

    return dict(DEFAULT_TOLERANCES)


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
($speedup on shape '$shape', $backend backend). See example.py; EXPORT.json says where it came from.

    import $package
    y = $package.$op(*inputs)                   # the task's init inputs, eager or compiled
    layer = $package.Module(*init_inputs)       # a module whose weights are yours to load
    x = $package.inputs()                       # the task's inputs as the run timed them
"""

from __future__ import annotations

from typing import Any

import torch

from . import _kernel, _reference

OP = "$namespace::$op"
SHAPE = "$shape"  # the task's shape variant the run timed the kernel on
DEVICE = "$device"
# The reference's sizes become the timed shape's, so its get_inputs() and get_init_inputs() give it.
vars(_reference).update(dict((getattr(_reference, "SHAPES", None) or {}).get(SHAPE, {})))
DTYPE: torch.dtype = getattr(torch, str(getattr(_reference, "DTYPE", "float32")))
# The evaluator's tolerance (atol, rtol) for the task's dtype, unless the task declares its own.
_TOLERANCES = $tolerances
_declared = getattr(_reference, "TOLERANCE", None)
_atol, _rtol = (_TOLERANCES[str(DTYPE).removeprefix("torch.")] if _declared is None else
                (float(_declared),) * 2 if isinstance(_declared, int | float) else
                (float(_declared["atol"]), float(_declared["rtol"])))
TOLERANCE = {"atol": _atol, "rtol": _rtol}

# Each Module's kernel instance, and its reference on the meta device (shapes and dtypes only, for
# the fake implementation), by slot: a custom op takes tensors and numbers, not modules.
_KERNELS: list[torch.nn.Module] = []
_META: list[torch.nn.Module] = []


def init_inputs() -> list[Any]:
    """The task's get_init_inputs() at the timed shape."""
    return list(_reference.get_init_inputs())


def inputs(seed: int = 0) -> list[Any]:
    """The task's get_inputs() at the timed shape, as the evaluator made them: drawn from `seed`,
    floating tensors in the task's dtype, on DEVICE."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        drawn = list(_reference.get_inputs())
    return [_place(x, DEVICE) for x in drawn]


def reference(seed: int = 0) -> torch.nn.Module:
    """The task's Model at the timed shape, weights drawn from `seed`, in the task's dtype on
    DEVICE, in eval mode: what the kernel was checked against."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _reference.Model(*init_inputs())
    return model.to(device=DEVICE, dtype=DTYPE).eval()


def shapes(value: Any) -> Any:
    """The shapes of an output: a tensor's, or a tuple or list of them."""
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    return type(value)(shapes(v) for v in value)


def _place(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device=device, dtype=DTYPE) if value.is_floating_point() else value.to(device)
    if isinstance(value, list | tuple):
        return type(value)(_place(v, device) for v in value)
    return value


def _register(kernel: torch.nn.Module, init: tuple) -> int:
    with torch.device("meta"):
        _META.append(_reference.Model(*init).to(dtype=DTYPE))
    _KERNELS.append(kernel)
    return len(_KERNELS) - 1


def _state(module: torch.nn.Module) -> tuple[list[str], list[torch.Tensor]]:
    named = [*module.named_parameters(), *module.named_buffers()]
    return [n for n, _ in named], [t for _, t in named]


def _flatten(value: Any) -> list[torch.Tensor]:
    return [value] if isinstance(value, torch.Tensor) else [t for v in value for t in _flatten(v)]


def _structure(value: Any) -> Any:
    """A tensor is "tensor"; a tuple or list, the same container of its items' structures."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, list | tuple) and value:
        return type(value)(_structure(v) for v in value)
    raise TypeError(f"{OP}: the task's Model returns {type(value).__name__}; an exported op returns a tensor, "
                    "or a tuple or list of tensors")


def _rebuild(structure: Any, flat: list[torch.Tensor], start: int = 0) -> tuple[Any, int]:
    """The op's outputs, in order, put back in the structure Model returns; and the next index."""
    if structure == "tensor":
        return flat[start], start + 1
    parts = []
    for part in structure:
        value, start = _rebuild(part, flat, start)
        parts.append(value)
    return (tuple(parts) if isinstance(structure, tuple) else parts), start


@torch.library.custom_op(OP, mutates_args=())
def _op(inputs: list[torch.Tensor], state: list[torch.Tensor], slot: int) -> list[torch.Tensor]:
    kernel = _KERNELS[slot]
    names, _ = _state(kernel)
    outs = _flatten(torch.func.functional_call(kernel, dict(zip(names, state, strict=True)), tuple(inputs)))
    # A custom op's outputs may not be, or share memory with, its inputs or each other.
    taken = {t.untyped_storage().data_ptr() for t in (*inputs, *state) if t.numel()}
    result = []
    for out in outs:
        key = out.untyped_storage().data_ptr() if out.numel() else None
        result.append(out.clone() if key in taken else out)
        taken.add(key)
    return result


@_op.register_fake
def _(inputs: list[torch.Tensor], state: list[torch.Tensor], slot: int) -> list[torch.Tensor]:
    # The reference's own weights are swapped for fresh meta tensors: under torch.compile every
    # tensor here must come from the tracer's fake mode, and a factory call makes one.
    reference = _META[slot]
    weights = {n: torch.empty(t.shape, dtype=t.dtype, device="meta")
               for n, t in [*reference.named_parameters(), *reference.named_buffers()]}
    metas = tuple(torch.empty_like(x, device="meta") for x in inputs)
    outs = _flatten(torch.func.functional_call(reference, weights, metas))
    return [inputs[0].new_empty(out.shape, dtype=out.dtype) for out in outs]


class Module(torch.nn.Module):
    """The kernel as a module built like the task's Model (same constructor arguments); its
    parameters and buffers (`kernel.*`) are passed to the op on every call, so loaded weights count."""

    def __init__(self, *init_inputs: Any):
        super().__init__()
        self.kernel = _kernel.ModelNew(*init_inputs)
        _prepare(self.kernel)
        self.slot = _register(self.kernel, init_inputs)

    def forward(self, *inputs: torch.Tensor) -> Any:
        return _rebuild(OUTPUT, _op(list(inputs), _state(self.kernel)[1], self.slot))[0]

    def load_weights(self, model: torch.nn.Module) -> Module:
        """Take `model`'s weights where name and shape match, as the evaluator gave the kernel
        the reference Model's when it checked it."""
        own = self.kernel.state_dict()
        self.kernel.load_state_dict({k: v for k, v in model.state_dict().items()
                                     if k in own and own[k].shape == v.shape}, strict=False)
        _prepare(self.kernel)
        return self


def _prepare(kernel: Any) -> None:
    """The kernel's `prepare_weights()`, if it has one (weights it prepacks or folds), called as the
    evaluator called it: once the weights are in place."""
    if callable(getattr(type(kernel), "prepare_weights", None)):
        with torch.no_grad():
            kernel.prepare_weights()


def _output_structure() -> Any:
    """What Model returns (a tensor, a tuple or a list), from the reference on the meta device;
    a reference that cannot run there (data-dependent ops) runs once for real."""
    try:
        with torch.device("meta"), torch.no_grad():
            return _structure(_META[_default.slot](*[_place(x, "meta") for x in _reference.get_inputs()]))
    except TypeError:
        raise
    except Exception:  # noqa: BLE001 - any failure on meta: the real run below says what is wrong
        with torch.no_grad():
            return _structure(reference()(*inputs()))


# Built at import, not on first call: a compiled function calling $op must find it ready.
_default = Module(*init_inputs()).to(DEVICE)
OUTPUT = _output_structure()  # the structure of Model's output: "tensor", or a tuple or list of them


def $op(*inputs: torch.Tensor) -> Any:
    """The task's Model.forward(*inputs) by the exported kernel, built with the task's init inputs."""
    return _default(*inputs)
'''

# The usage example written beside it: the kernel given Model's weights, compiled, checked.
_EXAMPLE = '''"""Use the exported $task kernel inside a torch.compile'd module, checked against Model.
Run it as `python -m $package.example` from the folder that holds $package/, or `python $package/example.py`."""
import sys
from pathlib import Path

if not __package__:  # run as a file: the package is the folder this file is in
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import $package as exported

reference = exported.reference()  # the task's Model on shape '$shape', in its dtype, as the evaluator built it
fast = exported.Module(*exported.init_inputs()).to(exported.DEVICE).load_weights(reference)  # Model's weights
inputs = exported.inputs()
with torch.no_grad():  # inference only: the op has no backward
    out = torch.compile(fast, fullgraph=True)(*inputs)  # the op stays one node of the graph
    expected = reference(*inputs)
torch.testing.assert_close(out, expected, **exported.TOLERANCE)  # the evaluator's tolerance
print("$namespace::$op matches the reference on shape '$shape':", exported.shapes(out))
'''
