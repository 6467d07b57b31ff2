"""A problem in KernelBench's format, plus this project's optional metadata.

A task file defines `Model`, `get_inputs()` and `get_init_inputs()`, reading its sizes from
module-level globals, exactly as KernelBench's problems do, so any KernelBench checkout loads
unchanged. This project's own tasks may add, at module level:

    DTYPE = "bfloat16"                    # dtype of floating inputs and weights (default float32)
    TOLERANCE = {"atol": 2e-2, "rtol": 2e-2}   # default: per dtype, see DEFAULT_TOLERANCES
    SHAPES = {"default": {"M": 4096}, "small": {"M": 64}, "odd": {"M": 999}}
    TAGS = ["gemm", "memory-bound"]
    ALLOWED_TORCH_OPS = ["aten::cumsum"]  # PyTorch compute a candidate may still call
    PROFILING_COVERAGE_FLOOR = 0.5        # CUDA: least share of device time in the candidate's own kernels
    def flops(M, ...): ...                # floating-point operations of one forward call
    def bytes_moved(M, ...): ...          # minimum DRAM bytes of one forward call

A shape variant overrides the module globals named by its keys before `get_inputs()` and
`get_init_inputs()` run. Inputs and weights always come from an explicit seed, never from
global RNG state.

This module imports only the standard library and torch: the sandbox child loads tasks on
bare GPU images.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import importlib.util
import itertools
import math
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

DEFAULT_SHAPE = "default"
# The variant the CPU backend checks and times when no shape is asked for: the default shapes are
# GPU-sized (seconds per call on one core), `small` ones take less time than the harness itself.
CPU_SHAPE = "cpu"

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}

DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    # (atol, rtol) against a float64 reference (float32 for half-precision tasks).
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "float64": (1e-8, 1e-8),
}

_module_counter = itertools.count()


class TaskLoadError(Exception):
    """A task file that cannot serve as a problem; the message names the file and the problem."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float


class Task:
    """One loaded problem. Each instance owns a private module object, so shape overrides of
    one Task never leak into another."""

    def __init__(self, name: str, source: str, path: Path | None = None):
        self.name = name
        self.source = source
        self.path = path
        hub = model_hub_use(source)
        if hub is not None:  # refused before it runs: importing it would reach for the network
            raise TaskLoadError(str(path or name), f"needs a model hub ({hub}; KernelBench level 4), "
                                "which agentforge does not download from")
        self.module = _exec_source(source, where=str(path or name))
        self._derived: dict[str, dict[str, Any]] = {}  # hidden variants: usable, never listed in `shapes`
        self._validate()

    # ----- metadata -------------------------------------------------------------------------
    @property
    def level(self) -> str | None:
        head = self.name.split("/", 1)[0]
        return head if head.startswith("level") else None

    @property
    def dtype_name(self) -> str:
        return str(getattr(self.module, "DTYPE", "float32"))

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.dtype_name]

    @property
    def tolerance(self) -> Tolerance:
        declared = getattr(self.module, "TOLERANCE", None)
        if declared is None:
            atol, rtol = DEFAULT_TOLERANCES[self.dtype_name]
        elif isinstance(declared, int | float):
            atol = rtol = float(declared)
        else:
            atol, rtol = float(declared["atol"]), float(declared["rtol"])
        return Tolerance(atol=atol, rtol=rtol)

    @property
    def shapes(self) -> dict[str, dict[str, Any]]:
        declared = dict(getattr(self.module, "SHAPES", {}) or {})
        return {DEFAULT_SHAPE: declared.pop(DEFAULT_SHAPE, {}), **declared}

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(getattr(self.module, "TAGS", ()) or ())

    @property
    def allowed_torch_ops(self) -> tuple[str, ...]:
        return tuple(getattr(self.module, "ALLOWED_TORCH_OPS", ()) or ())

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def scaling_sizes(self) -> dict[str, tuple[int, ...]]:
        """The integer module globals that the declared shape variants set to more than one value,
        each with its values (the module's own first): what the task says may scale. A size no
        variant changes, or one fixed inside `get_inputs`, is not here."""
        values: dict[str, list[int]] = {}
        for name in self.shapes:
            for key, value in self.sizes(name).items():
                if type(value) is int and value > 0 and value not in values.setdefault(key, []):
                    values[key].append(value)
        return {k: tuple(v) for k, v in values.items() if len(v) > 1}

    def add_derived_shape(self, name: str, overrides: dict[str, int]) -> None:
        """A variant derived by the evaluator (a hidden shape): `shape_variant(name)` and everything
        built on it accept it; `shapes` does not list it, so nothing else finds it."""
        if name in self.shapes:
            raise ValueError(f"task {self.name} declares a shape named {name!r} already")
        unknown = [k for k in overrides if k not in vars(self.module)]
        if unknown:
            raise ValueError(f"{unknown} are not module globals of task {self.name}")
        self._derived[name] = dict(overrides)

    def remove_derived_shape(self, name: str) -> None:
        self._derived.pop(name, None)

    def sizes(self, shape: str = DEFAULT_SHAPE) -> dict[str, Any]:
        """The module-level sizes in force for a shape variant (its overrides applied)."""
        overrides = self._shape_overrides(shape)
        base = {k: v for k, v in vars(self.module).items() if _is_size(k, v)}
        return {**base, **overrides}

    def flops(self, shape: str = DEFAULT_SHAPE) -> float | None:
        return self._metric("flops", shape)

    def bytes_moved(self, shape: str = DEFAULT_SHAPE) -> float | None:
        return self._metric("bytes_moved", shape)

    # ----- materialisation --------------------------------------------------------------
    def make_inputs(
        self, seed: int, shape: str = DEFAULT_SHAPE, device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None,
    ) -> list[Any]:
        """Inputs for one call, drawn from `seed` on the CPU, then moved and cast.

        Floating tensors take `dtype` (the task's dtype by default); other tensors keep theirs.
        """
        with self.shape_variant(shape), _seeded(seed):
            inputs = self._call("get_inputs")
        return [_place(x, device, dtype or self.dtype) for x in inputs]

    def init_inputs(self, shape: str = DEFAULT_SHAPE) -> list[Any]:
        with self.shape_variant(shape):
            return self._call("get_init_inputs")

    def input_numel(self, shape: str = DEFAULT_SHAPE) -> int | None:
        """Elements of one call's inputs plus the model's parameters and buffers, found without
        allocating anything (on the meta device); None when the task cannot be sized that way."""
        try:
            with self.shape_variant(shape), torch.device("meta"), _seeded(0):
                inputs = list(self.module.get_inputs())
            model = self.instantiate_on_meta(shape)
        except Exception:
            return None
        state = itertools.chain(model.parameters(), model.buffers())
        return sum(t.numel() for t in flatten_tensors(inputs)) + sum(t.numel() for t in state)

    def make_model(
        self, seed: int, shape: str = DEFAULT_SHAPE, device: str | torch.device = "cpu",
        dtype: torch.dtype | None = None, model_cls: type | None = None, training: bool = False,
    ) -> torch.nn.Module:
        """The reference `Model` (or `model_cls`) with weights drawn from `seed`.

        In eval mode by default (deterministic: dropout off, BatchNorm on running statistics).
        KernelBench's own harness leaves models in training mode; `training=True` reproduces
        that, and matters for its deep CNNs, whose eval-mode output barely depends on the input
        (fresh running statistics leave BatchNorm an identity and the signal fades)."""
        cls = model_cls or self.module.Model
        init = self.init_inputs(shape)
        with self.shape_variant(shape), _seeded(seed):
            model = cls(*init)
        return model.to(device=device, dtype=dtype or self.dtype).train(training)

    def smallest_shape(self) -> str:
        """The cheapest variant to run: `small` when declared, else the one with the fewest input
        and parameter elements (the default when nothing can be sized)."""
        shapes = list(self.shapes)
        if "small" in shapes:
            return "small"
        sized = [(n, s) for s in shapes if (n := self.input_numel(s)) is not None]
        return min(sized)[1] if sized else DEFAULT_SHAPE

    def instantiate_on_meta(self, shape: str = DEFAULT_SHAPE) -> torch.nn.Module:
        """Build `Model` without allocating its weights (for listing huge suites).

        A constructor that reads tensor values (`.item()`, as Swin's drop-path schedule does)
        cannot run on the meta device; such a model is built on the CPU instead, seeded. Only
        the errors the meta device raises (RuntimeError, NotImplementedError) get that second
        try: any other error is the constructor's own and would only cost memory to repeat."""
        init = self.init_inputs(shape)
        with self.shape_variant(shape):
            try:
                with torch.device("meta"):
                    return self.module.Model(*init)
            except (RuntimeError, NotImplementedError):
                pass
            except Exception as exc:
                raise TaskLoadError(self._where, f"Model(...) fails: {_one_line(exc)}") from exc
            try:
                with _seeded(0):
                    return self.module.Model(*init)
            except Exception as exc:
                raise TaskLoadError(self._where, f"Model(...) fails: {_one_line(exc)}") from exc

    def footprint(self, shape: str = DEFAULT_SHAPE, forward_budget_s: float | None = None
                  ) -> dict[str, float | None]:
        """Bytes of one call on a shape variant, found on the meta device (nothing allocated):
        its inputs (floating ones at the task's dtype), the model's parameters and buffers, its
        outputs (None when the forward cannot run on meta, or runs past `forward_budget_s`: a
        recurrent layer on meta steps through time in Python, 30 s for KernelBench's GRUs), and
        the declared `bytes_moved`."""
        with self.shape_variant(shape), torch.device("meta"), _seeded(0):
            inputs = list(self.module.get_inputs())
        placed = [_place(x, "meta", self.dtype) for x in inputs]
        model = self.instantiate_on_meta(shape).to(device="meta", dtype=self.dtype)
        state = itertools.chain(model.parameters(), model.buffers())
        meta_ready()
        try:
            with torch.no_grad(), self.shape_variant(shape), time_budget(forward_budget_s):
                outputs: float | None = _nbytes(model(*placed))
        except Exception:  # data-dependent ops have no meta kernel; or out of time
            outputs = None
        return {"inputs": _nbytes(placed), "params": float(sum(t.numel() * t.element_size() for t in state)),
                "outputs": outputs, "declared": self.bytes_moved(shape)}

    @contextlib.contextmanager
    def shape_variant(self, shape: str) -> Iterator[None]:
        overrides = self._shape_overrides(shape)
        saved = {k: vars(self.module)[k] for k in overrides if k in vars(self.module)}
        vars(self.module).update(overrides)
        try:
            yield
        finally:
            for key in overrides:
                if key in saved:
                    vars(self.module)[key] = saved[key]
                else:
                    vars(self.module).pop(key, None)

    # ----- internals --------------------------------------------------------------------
    def _shape_overrides(self, shape: str) -> dict[str, Any]:
        shapes = self.shapes
        if shape in self._derived:
            return {**shapes.get(DEFAULT_SHAPE, {}), **self._derived[shape]}
        if shape not in shapes:
            raise KeyError(f"task {self.name} has no shape {shape!r}; it has {sorted(shapes)}")
        return dict(shapes[shape])

    @property
    def _where(self) -> str:
        return str(self.path or self.name)

    def _call(self, fn_name: str) -> list[Any]:
        try:
            return list(getattr(self.module, fn_name)())
        except Exception as exc:
            raise TaskLoadError(self._where, f"{fn_name}() fails: {_one_line(exc)}") from exc

    def _metric(self, fn_name: str, shape: str) -> float | None:
        """Call the task's `flops`/`bytes_moved` with the module globals its parameters name
        (sizes, or e.g. DTYPE), the shape variant applied."""
        fn = getattr(self.module, fn_name, None)
        if not callable(fn):
            return None
        wanted = fn.__code__.co_varnames[: fn.__code__.co_argcount]
        with self.shape_variant(shape):
            missing = [k for k in wanted if k not in vars(self.module)]
            if missing:
                raise TaskLoadError(self._where, f"{fn_name}() takes {missing}, which are not module globals")
            value = float(fn(**{k: vars(self.module)[k] for k in wanted}))
        if not math.isfinite(value) or value < 0:
            raise TaskLoadError(self._where, f"{fn_name}() gives {value} for shape {shape!r}")
        return value

    def _validate(self) -> None:
        where = self._where
        for attr in ("Model", "get_inputs", "get_init_inputs"):
            if not hasattr(self.module, attr):
                raise TaskLoadError(where, f"defines no `{attr}`")
        if not (isinstance(self.module.Model, type) and issubclass(self.module.Model, torch.nn.Module)):
            raise TaskLoadError(where, "`Model` is not a torch.nn.Module subclass")
        if self.dtype_name not in DTYPES:
            raise TaskLoadError(where, f"DTYPE {self.dtype_name!r} is not one of {sorted(DTYPES)}")
        for attr in ("get_inputs", "get_init_inputs", "flops", "bytes_moved"):
            if hasattr(self.module, attr) and not callable(getattr(self.module, attr)):
                raise TaskLoadError(where, f"`{attr}` is not a function")
        floor = getattr(self.module, "PROFILING_COVERAGE_FLOOR", None)
        if floor is not None and (isinstance(floor, bool) or not isinstance(floor, int | float) or not 0 <= floor <= 1):
            raise TaskLoadError(where, f"PROFILING_COVERAGE_FLOOR is {floor!r}, not a share between 0 and 1")
        declared = getattr(self.module, "TOLERANCE", None)
        if not (declared is None or isinstance(declared, int | float)
                or (isinstance(declared, dict) and {"atol", "rtol"} <= declared.keys())):
            raise TaskLoadError(where, "TOLERANCE is neither a number nor a dict with atol and rtol")
        shapes = getattr(self.module, "SHAPES", None) or {}
        if not isinstance(shapes, dict):
            raise TaskLoadError(where, "SHAPES is not a dict of shape name -> module globals")
        for shape, sizes in shapes.items():
            if not isinstance(sizes, dict):
                raise TaskLoadError(where, f"SHAPES[{shape!r}] is not a dict of module globals")
            unknown = [k for k in sizes if k not in vars(self.module)]
            if unknown:
                raise TaskLoadError(where, f"SHAPES[{shape!r}] sets {unknown}, which are not module globals")

    def __repr__(self) -> str:
        return f"Task({self.name!r})"


def backend_default_shapes(shape_names: Sequence[str] | None, backend: str) -> tuple[str, ...]:
    """The shape variants a job checks when none is asked for, the first one timed: on the CPU
    backend a task's `cpu` variant, then its `small` one (edge sizes, cheaply); elsewhere, or for a
    task without a `cpu` variant, () (every variant, as before)."""
    names = tuple(shape_names or ())
    if backend != "cpu" or CPU_SHAPE not in names:
        return ()
    return (CPU_SHAPE, *(s for s in ("small",) if s in names))


# ----- what a task file says without running it -------------------------------------------------
# Task files are trusted no more than they must be: a process that only wants to know a task's
# shape names, or whether it needs a model hub, reads its syntax tree instead of importing it.
_HUB_MODULES = ("transformers", "huggingface_hub", "diffusers", "timm")
PROBE_FORWARD_BUDGET_S = 10.0  # per shape: past it the probe sizes outputs as the inputs


def declared_shape_names(source: str) -> tuple[str, ...] | None:
    """The shape variants a task file declares, read from its syntax tree: `default` first, then
    the keys of a literal module-level `SHAPES` dict, as `Task.shapes` orders them. None when the
    file does not parse or builds SHAPES in a way only running it would tell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    names: list[str] | None = []
    for node in tree.body:
        targets = _assigned_names(node)
        if "SHAPES" not in targets:
            continue
        value = getattr(node, "value", None)
        try:
            shapes = ast.literal_eval(value) if isinstance(node, ast.Assign | ast.AnnAssign) and value else None
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            shapes = None
        if shapes is not None and not isinstance(shapes, dict):
            return None
        names = None if shapes is None else [str(k) for k in shapes]
    if names is None or _mutates(tree, "SHAPES"):
        return None
    return (DEFAULT_SHAPE, *(n for n in names if n != DEFAULT_SHAPE))


def model_hub_use(source: str) -> str | None:
    """Why a task file needs a model hub (KernelBench's level 4 builds Hugging Face models with
    `from_pretrained`, fetched over the network at import), or None."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module]
        for module in modules:
            if module.split(".")[0] in _HUB_MODULES:
                return f"imports {module.split('.')[0]}"
        if isinstance(node, ast.Attribute) and node.attr == "from_pretrained":
            return "calls from_pretrained"
    return None


def _assigned_names(node: ast.stmt) -> set[str]:
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    else:
        return set()
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _mutates(tree: ast.Module, name: str) -> bool:
    """Anything but a plain module-level assignment touching `name`: `SHAPES[k] = ...`,
    `SHAPES.update(...)`, `global SHAPES` in a function, an augmented or tuple assignment."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript | ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == name:
            return True
        if isinstance(node, ast.Global) and name in node.names:
            return True
        if isinstance(node, ast.AugAssign) and name in _assigned_names(node):
            return True
        if isinstance(node, ast.Assign) and name in _assigned_names(node) and not (
                len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            return True
    return False


def probe_entry(job: Any) -> Any:
    """Sandbox entry (`SandboxConfig.entry = "agentforge.task:probe_entry"`): load the job's task
    and size each of its shape variants on the meta device, before anything is built, so that a
    caller learns the shapes and what they weigh without importing the task itself. Runs no
    candidate code. The figures travel in `candidate_meta["task_probe"]`; a task that does not
    load is a `task_error`."""
    from agentforge.candidate import code_hash
    from agentforge.evaluator.result import ErrorRecord, EvalResult, Stage, Status

    # The sandbox checks that a verdict names the job's task and candidate (here, no candidate).
    base = {"task_name": job.task_name, "candidate_hash": code_hash(job.candidate_source), "backend": job.backend}
    try:
        task = Task(job.task_name, job.task_source)
    except TaskLoadError as exc:
        return EvalResult(**base, status=Status.TASK_ERROR, stage=Stage.TASK,
                          error=ErrorRecord(type="TaskLoadError", message=str(exc)[:2000]))
    derived = _derived_cpu_shape(task, job)
    if derived is not None:
        task = Task(job.task_name, job.task_source + derived["source_suffix"])
    shapes: dict[str, Any] = {}
    for shape in task.shapes:
        try:
            shapes[shape] = task.footprint(shape, forward_budget_s=PROBE_FORWARD_BUDGET_S)
            shapes[shape]["numel"] = task.input_numel(shape)
        except MemoryError as exc:  # sizing alone exhausted the sandbox: that shape is too large here
            shapes[shape] = {"error": f"MemoryError: {exc}", "too_large": True}
        except Exception as exc:  # left to the evaluator's own task check to report
            shapes[shape] = {"error": _one_line(exc)}
    probe = {"shapes": shapes, "dtype": task.dtype_name, "memory": _device_memory(job.device)}
    if derived is not None:
        probe["derived"] = derived
    return EvalResult(**base, status=Status.OK, stage=Stage.DONE, candidate_meta={"task_probe": probe})


def _derived_cpu_shape(task: Task, job: Any) -> dict[str, Any] | None:
    """For a CPU job that names no shape, on a problem that declares no variants (a KernelBench
    file): the `cpu` variant derived from its sizes (`agentforge.cpu_shape`), as plain data."""
    if job.backend != "cpu" or job.track != "hardened" or job.shapes:
        return None
    from agentforge.cpu_shape import derive_cpu_shape

    derived = derive_cpu_shape(task)
    return None if derived is None else {**derived.to_dict(), "source_suffix": derived.source_suffix(),
                                         "description": derived.describe()}


@functools.cache
def meta_ready() -> None:
    """Run one operator on the meta device, outside any time budget: the first one imports torch's
    meta kernels and decompositions (14 s on a loaded 2-core VM), and a budget's alarm raised in
    the middle of those imports would leave them half made for the rest of the process."""
    torch.relu(torch.empty(1, device="meta"))


@contextlib.contextmanager
def time_budget(seconds: float | None) -> Iterator[None]:
    """TimeoutError in the block after `seconds` of wall time (SIGALRM: main thread only; elsewhere,
    or with None, no budget)."""
    import signal
    import threading

    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"ran past {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _device_memory(device: str) -> dict[str, float | str | None]:
    """What the device the job names can hold: the GPU's memory, or the host's available memory."""
    if device.startswith("cuda") and torch.cuda.is_available():
        index = int(device.split(":")[1]) if ":" in device else 0
        free, total = torch.cuda.mem_get_info(index)
        return {"kind": "cuda", "free_bytes": float(free), "total_bytes": float(total)}
    found: dict[str, float] = {}
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable"):
                found[key] = float(rest.split()[0]) * 1024
    return {"kind": "cpu", "free_bytes": found.get("MemAvailable"), "total_bytes": found.get("MemTotal")}


def _nbytes(value: Any) -> float:
    return float(sum(t.numel() * t.element_size() for t in flatten_tensors(value)))


# ----- loading ----------------------------------------------------------------------------
def default_tasks_root() -> Path:
    return Path(__file__).resolve().parent.parent / "tasks"


@dataclass(frozen=True)
class TaskText:
    """A task file read but not run: enough for an EvalJob (`name`, `source`, as a `Task` gives
    them) and for what its text alone tells (`shape_names`: None when only running it would)."""

    name: str
    source: str
    path: Path | None = None
    shape_names: tuple[str, ...] | None = None
    # Set when `source` is the file's text plus a `cpu` variant the task probe derived for it
    # (`agentforge.cpu_shape`): what that variant changes, said in every verdict made from it.
    derived_shape: dict[str, Any] | None = None

    def with_derived_shape(self, derived: dict[str, Any]) -> TaskText:
        """This task with the probe's derived variant appended to its source."""
        names = (*(self.shape_names or (DEFAULT_SHAPE,)), derived["name"])
        return TaskText(self.name, self.source + derived["source_suffix"], self.path, names,
                        {k: derived[k] for k in ("name", "overrides", "original", "divisor", "description")})

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]


def read_task(ref: str | Path, root: Path | None = None) -> TaskText:
    """Find and read a task as `load_task` does, without importing it."""
    path = resolve_task_path(ref, root)
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskLoadError(str(path), f"cannot read: {getattr(exc, 'strerror', None) or exc}") from exc
    return TaskText(task_name_for(path), source, path, declared_shape_names(source))


def load_task(ref: str | Path, root: Path | None = None) -> Task:
    """Load a task by file path, or by `level/name` (with or without `.py`) under `root`."""
    path = resolve_task_path(ref, root)
    try:
        source = path.read_text()
    except OSError as exc:
        raise TaskLoadError(str(path), f"cannot read: {exc.strerror}") from exc
    return Task(task_name_for(path), source, path)


def resolve_task_path(ref: str | Path, root: Path | None = None) -> Path:
    candidate = Path(ref)
    if candidate.is_file():
        return candidate.resolve()
    root = root or default_tasks_root()
    for option in (root / candidate, root / f"{candidate}.py"):
        if option.is_file():
            return option.resolve()
    raise TaskLoadError(str(ref), f"no such task file (looked in {root})")


def task_name_for(path: Path) -> str:
    """`level1/relu` for tasks/level1/relu.py; the bare stem for a file outside any level."""
    parent = path.resolve().parent.name
    return f"{parent}/{path.stem}" if parent.startswith("level") else path.stem


def discover(root: Path | None = None) -> list[Path]:
    """Every problem file under `root`, in level order; a KernelBench checkout's
    `KernelBench/level*/` layout is found too."""
    root = Path(root or default_tasks_root())
    pattern = "*.py" if root.name.startswith("level") else "level*/*.py"
    files = sorted(p for p in root.rglob(pattern) if not p.name.startswith("_"))
    return sorted(files, key=lambda p: (_level_number(p.parent.name), _natural_key(p.name)))


def _level_number(name: str) -> int:
    digits = "".join(ch for ch in name if ch.isdigit())
    return int(digits) if digits else 0


def _natural_key(name: str) -> tuple[Any, ...]:
    head = "".join(itertools.takewhile(str.isdigit, name))
    return (int(head) if head else 1 << 30, name)


def _exec_source(source: str, where: str) -> ModuleType:
    module_name = f"agentforge_task_{next(_module_counter)}"
    try:
        code = compile(source, where, "exec")
    except SyntaxError as exc:
        raise TaskLoadError(where, f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    spec = importlib.util.spec_from_loader(module_name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = where
    # Registered so that classes defined in the task pickle and dataclasses resolve.
    sys.modules[module_name] = module
    try:
        exec(code, vars(module))
    except BaseException as exc:  # SystemExit from a script-style file is a load error too
        sys.modules.pop(module_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        if isinstance(exc, ModuleNotFoundError) and exc.name:
            raise TaskLoadError(where, f"fails on import: needs the package {exc.name!r}, "
                                "which is not installed") from exc
        raise TaskLoadError(where, f"fails on import: {_one_line(exc)}") from exc
    return module


def _one_line(exc: BaseException) -> str:
    """`Type: first line of the message`, so a listing keeps one line per file."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _is_size(key: str, value: Any) -> bool:
    return not key.startswith("_") and isinstance(value, int | float | tuple) and not isinstance(value, bool)


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """torch's CPU generator and Python's `random` seeded for the block, then restored, so a
    task's draws depend only on `seed` and leave the caller's random state untouched."""
    py_state = random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            random.setstate(py_state)


def _place(value: Any, device: str | torch.device, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            return value.to(device=device, dtype=dtype)
        return value.to(device=device)
    if isinstance(value, list | tuple):
        return type(value)(_place(v, device, dtype) for v in value)
    return value


def flatten_tensors(value: Any) -> Sequence[torch.Tensor]:
    """The tensors of a (possibly nested) output, in order."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in flatten_tensors(v)]
    return []
