"""Run-time evidence for the integrity rules, gathered while the candidate executes.

* `OpRecorder`: the aten operators `ModelNew.forward` dispatches (C++ `at::` calls made by an
  extension included: dispatch modes are thread-local and seen by the dispatcher).
* `TamperSnapshot`: identities of the functions the harness relies on (timers, comparisons,
  synchronisation, module call machinery, the evaluator's own functions) and the process-wide
  precision switches, taken before the candidate executes and compared afterwards.
  Functions are compared by identity and by their code, defaults and closure, so a patch that
  swaps `__code__` in place is seen too.
* `ConcurrencyWatch`: Python threads and child processes the candidate leaves running, checked at
  the end and (by `still_running`) the moment each call returns.
* `ModuleCallWatch`: the classes of every `nn.Module` called while active (a call to the
  reference `Model` from inside `ModelNew`, however it was found).
* `inspect_outputs`: outputs must be plain `torch.Tensor`s with their own storage.
"""

from __future__ import annotations

import builtins
import hashlib
import inspect
import os
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch._dynamo
from torch.utils._python_dispatch import TorchDispatchMode

# Operators that allocate, describe or re-view memory: no compute a kernel should have done.
NON_COMPUTE_OPS = frozenset({
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided",
    "aten::zeros", "aten::zeros_like", "aten::new_zeros", "aten::zero_", "aten::fill_", "aten::full",
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::as_strided", "aten::permute", "aten::transpose",
    "aten::t", "aten::expand", "aten::squeeze", "aten::unsqueeze", "aten::select", "aten::slice", "aten::detach",
    "aten::alias", "aten::lift_fresh", "aten::_local_scalar_dense", "aten::resize_", "aten::split",
    "aten::unbind", "aten::view_as_real", "aten::view_as_complex", "aten::_reshape_alias",
    "aten::split_with_sizes", "aten::narrow", "aten::unflatten", "aten::flatten", "aten::contiguous",
    "aten::set_", "aten::record_stream", "aten::is_same_size", "aten::sym_size", "aten::sym_stride",
    "aten::sym_numel", "aten::sym_storage_offset", "aten::is_contiguous", "aten::size", "aten::stride",
    "prim::device", "aten::_has_compatible_shallow_copy_type",
})


class OpRecorder(TorchDispatchMode):
    """Counts every aten operator dispatched while active."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = func._schema.name
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))

    def compute_ops(self, allowed: Iterable[str] = ()) -> dict[str, int]:
        return compute_ops(self.counts, allowed)


def compute_ops(counts: dict[str, int], allowed: Iterable[str] = ()) -> dict[str, int]:
    """The operators in `counts` that did compute a kernel should have done."""
    allowed_set = NON_COMPUTE_OPS | set(allowed)
    return {k: v for k, v in counts.items() if k not in allowed_set}


# ----- tamper detection ---------------------------------------------------------------------
_WATCHED_ATTRIBUTES: tuple[tuple[Any, str], ...] = (
    (torch, "allclose"), (torch, "isclose"), (torch, "equal"), (torch, "abs"), (torch, "max"),
    (torch, "isnan"), (torch, "isfinite"), (torch, "manual_seed"), (torch, "randn"), (torch, "rand"),
    (torch.testing, "assert_close"), (torch.Tensor, "__eq__"), (torch.Tensor, "allclose"),
    (torch.Tensor, "sub"), (torch.Tensor, "__sub__"), (torch.Tensor, "abs"), (torch.Tensor, "to"),
    (torch.Tensor, "double"), (torch.Tensor, "float"), (torch.Tensor, "clone"), (torch.Tensor, "copy_"),
    (torch.Tensor, "data_ptr"), (torch.Tensor, "__torch_function__"), (torch.nn.Module, "__call__"),
    (torch.nn.Module, "_call_impl"), (torch.nn.Module, "load_state_dict"), (torch.cuda, "synchronize"),
    (torch.cuda, "Event"), (torch.cuda, "current_stream"), (torch.cuda, "Stream"),
    (time, "perf_counter"), (time, "perf_counter_ns"), (time, "monotonic"), (time, "monotonic_ns"),
    (time, "time"), (builtins, "isinstance"), (builtins, "type"), (builtins, "len"),
    (torch, "isinf"), (torch, "equal"), (torch, "from_numpy"), (torch.Tensor, "detach"), (torch.Tensor, "cpu"),
    (torch.Tensor, "contiguous"), (torch.Tensor, "numpy"), (torch.Tensor, "view"), (torch.Tensor, "any"),
    (torch.Tensor, "sum"), (torch.Tensor, "max"), (torch.Tensor, "__gt__"), (torch.Tensor, "__getitem__"),
    (torch.Tensor, "clamp_min"), (torch.Tensor, "untyped_storage"), (torch.Tensor, "is_floating_point"),
    (torch.Tensor, "__torch_dispatch__"), (torch.Tensor, "mul_"), (torch.nn.Module, "state_dict"),
    (torch.nn.Module, "__getattr__"), (torch.random, "fork_rng"), (hashlib, "sha256"), (threading, "enumerate"),
    (os, "listdir"), (builtins, "open"), (builtins, "float"), (builtins, "bool"), (builtins, "max"),
)


def precision_switches() -> dict[str, Any]:
    """The process-wide switches that change fp32 results (TF32, matmul precision, default dtype)."""
    return {
        "torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32,
        "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
        "torch.default_dtype": str(torch.get_default_dtype()),
    }


# The harness's own modules (and the task loader both sides draw inputs from).
_HARNESS_MODULES = ("agentforge.evaluator", "agentforge.sandbox", "agentforge.task", "agentforge.candidate")
# Namespaces the reference computes with: a patched `torch.relu` would change both sides at once.
_REFERENCE_NAMESPACES: tuple[tuple[str, Any], ...] = (
    ("torch", torch), ("torch.nn.functional", torch.nn.functional), ("torch.Tensor", torch.Tensor),
    ("torch.nn.Module", torch.nn.Module), ("torch.linalg", torch.linalg), ("torch.special", torch.special),
    ("torch.fft", torch.fft),
)


def _evaluator_functions() -> dict[str, Any]:
    """Every function of the harness's modules, and the methods of the classes they define."""
    ids = {}
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(_HARNESS_MODULES):
            continue
        for attr, value in list(vars(module).items()):
            if not callable(value):
                continue
            ids[f"{name}.{attr}"] = value
            if isinstance(value, type) and value.__module__ == name:
                for method, member in list(vars(value).items()):
                    if callable(member) or isinstance(member, staticmethod | classmethod | property):
                        ids[f"{name}.{attr}.{method}"] = member
    return ids


def _reference_functions() -> dict[str, Any]:
    """The public callables of torch's namespaces, by identity (a few thousand `getattr_static`s)."""
    ids = {}
    for label, namespace in _REFERENCE_NAMESPACES:
        names = vars(namespace) if isinstance(namespace, type) else getattr(namespace, "__dict__", {})
        for attr, value in list(names.items()):
            if not attr.startswith("__") and callable(value):
                ids[f"{label}.{attr}"] = value
    return ids


def _identity(value: Any) -> tuple[Any, ...]:
    """What must stay the same for a function to be the same function: the object itself and,
    for Python functions (plain, static, class or bound), the parts that can be swapped in place,
    the callables its closure holds among them (`_held`)."""
    target = value
    if isinstance(target, staticmethod | classmethod):
        target = target.__func__
    target = getattr(target, "__func__", target)
    if inspect.isfunction(target):
        return (value, target.__code__, target.__defaults__, target.__kwdefaults__, target.__closure__,
                *_held(target))
    return (value,)


def _disable_dynamo_code() -> Any:
    """The code of the wrapper `torch._disable_dynamo` puts around a function (None where this
    torch has no such wrapper)."""
    try:
        from torch import _compile

        return _compile._disable_dynamo(lambda: None).__code__
    except Exception:
        return None


_DISABLE_DYNAMO_CODE = _disable_dynamo_code()
_DYNAMO_CACHE = "__dynamo_disable"  # where that wrapper keeps, on the function it wraps, what it calls


def _held(target: Any) -> tuple[Any, ...]:
    """The callables `target`'s closure holds now. `__closure__` stays the same tuple when a cell's
    contents are reassigned (`cell.cell_contents = other`), so the contents are compared too: the
    decorated function behind `torch.random.fork_rng` or `torch.manual_seed` swapped in place.
    For `torch._disable_dynamo`'s wrapper (`torch.manual_seed`, every dispatch mode's
    `__torch_dispatch__`, the OpRecorder's among them), also what it calls: the function it caches on
    the one it wraps, on the first call or whenever a candidate sets it (`_fill_dynamo_cache`)."""
    held: list[Any] = []
    for cell in target.__closure__ or ():
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            contents = None
        held.append(contents if callable(contents) else None)
    if _DISABLE_DYNAMO_CODE is not None and target.__code__ is _DISABLE_DYNAMO_CODE:
        wrapped = _closure_value(target, "fn")
        cached = vars(wrapped).get(_DYNAMO_CACHE) if hasattr(wrapped, "__dict__") else None
        if inspect.isfunction(cached):
            # dynamo's `_fn`, one level down: its own cells (the function it calls, and its
            # DisableContext, whose `callback` it installs as the frame hook) can be swapped as well
            context = _closure_value(cached, "self")
            held += [*_identity(cached), getattr(context, "callback", None)]
        else:
            held.append(cached)
    return tuple(held)


def _closure_value(target: Any, name: str) -> Any:
    for free, cell in zip(target.__code__.co_freevars, target.__closure__ or (), strict=False):
        if free == name:
            try:
                return cell.cell_contents
            except ValueError:
                return None
    return None


def _fill_dynamo_cache(values: Iterable[Any]) -> None:
    """Do now, for each `torch._disable_dynamo` wrapper among `values`, what its first call does:
    cache `torch._dynamo.disable(fn)` on the function it wraps. A snapshot taken after this sees
    that cache change only when something else writes it."""
    if _DISABLE_DYNAMO_CODE is None:
        return
    for value in values:
        target = getattr(value, "__func__", value)
        if not inspect.isfunction(target) or target.__code__ is not _DISABLE_DYNAMO_CODE:
            continue
        wrapped = _closure_value(target, "fn")
        if wrapped is None or not hasattr(wrapped, "__dict__") or vars(wrapped).get(_DYNAMO_CACHE) is not None:
            continue
        try:
            setattr(wrapped, _DYNAMO_CACHE, torch._dynamo.disable(wrapped, _closure_value(target, "recursive"),
                                                                   wrapping=False))
        except Exception:  # as torch's own first call would then; compared as it is
            continue


def _candidate_code(value: Any) -> bool:
    """Whether `value` is a function compiled from the candidate's source (`loading.load_candidate`)."""
    target = getattr(value, "__func__", value)
    return inspect.isfunction(target) and target.__code__.co_filename.startswith("<candidate ")


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


@dataclass
class TamperSnapshot:
    objects: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # `_identity` of each, compared with `is`
    switches: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def take(cls) -> TamperSnapshot:
        raw = {f"{getattr(owner, '__name__', owner)}.{attr}": inspect.getattr_static(owner, attr, None)
               for owner, attr in _WATCHED_ATTRIBUTES}
        raw.update(_reference_functions())
        raw.update(_evaluator_functions())
        _fill_dynamo_cache(raw.values())
        return cls({k: _identity(v) for k, v in raw.items()}, precision_switches())

    def changes(self) -> tuple[list[str], list[str]]:
        """(patched functions, changed precision switches) since the snapshot."""
        now = TamperSnapshot.take()
        patched = sorted(k for k, v in self.objects.items() if not _same(now.objects.get(k, v), v))
        # A harness module first imported after the snapshot (the judge's, which the worker never
        # loads, say) holding a function the candidate's source defined: patched all the same.
        patched += sorted(k for k, v in now.objects.items() if k not in self.objects and _candidate_code(v[0]))
        switched = sorted(f"{k}: {self.switches[k]!r} -> {now.switches[k]!r}"
                          for k in self.switches if now.switches[k] != self.switches[k])
        return patched, switched


# ----- concurrency --------------------------------------------------------------------------
def _child_pids() -> set[int]:
    pids: set[int] = set()
    task_dir = f"/proc/{os.getpid()}/task"
    try:
        for tid in os.listdir(task_dir):
            try:
                with open(f"{task_dir}/{tid}/children") as fh:
                    pids.update(int(p) for p in fh.read().split())
            except OSError:
                continue
    except OSError:
        pass
    return pids


@dataclass
class ConcurrencyWatch:
    threads: set[int] = field(default_factory=set)
    children: set[int] = field(default_factory=set)

    @classmethod
    def start(cls) -> ConcurrencyWatch:
        return cls({t.ident or 0 for t in threading.enumerate()}, _child_pids())

    def leftovers(self) -> list[str]:
        found = [f"thread {t.name!r} still running" for t in threading.enumerate()
                 if t.is_alive() and (t.ident or 0) not in self.threads]
        found += [f"child process {pid} still running" for pid in sorted(_child_pids() - self.children)]
        return found

    def still_running(self, when: str) -> list[str]:
        """Threads and processes started since `start()` that are alive now, `when` (e.g. "when
        forward returned"): work a call left behind, even if it finishes before anyone looks again."""
        return [f"{item} {when}" for item in self.leftovers()]


# ----- calls of other modules ---------------------------------------------------------------
class ModuleCallWatch:
    """Records the class of every `nn.Module` called while active (a global forward pre-hook)."""

    def __init__(self) -> None:
        self.classes: set[type] = set()
        self._handle: Any = None

    def _hook(self, module: torch.nn.Module, args: Any) -> None:
        self.classes.add(type(module))

    def __enter__(self) -> ModuleCallWatch:
        self._handle = torch.nn.modules.module.register_module_forward_pre_hook(self._hook)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def called(self, reference_cls: type) -> list[str]:
        """Names of the called classes that are the reference, built on it, or defined by any loaded task
        file (another load of the same task is the same reference)."""
        task_prefix = reference_cls.__module__.rstrip("0123456789")
        return sorted(f"{c.__module__}.{c.__qualname__}" for c in self.classes
                      if issubclass(c, reference_cls) or (task_prefix and c.__module__.startswith(task_prefix)
                                                          and c.__module__[len(task_prefix):].isdigit()))


# ----- outputs ------------------------------------------------------------------------------
def inspect_outputs(outputs: list[Any], inputs: list[Any]) -> list[tuple[str, str]]:
    """(rule, evidence) for outputs that are not plain tensors with storage of their own."""
    problems: list[tuple[str, str]] = []
    input_ranges = [_storage_range(t) for t in inputs if isinstance(t, torch.Tensor)]
    for i, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor):
            problems.append(("output_type", f"output {i} is {type(out).__name__}, not a torch.Tensor"))
            continue
        if type(out) is not torch.Tensor:
            problems.append(("lazy_output", f"output {i} is a {type(out).__qualname__}, a Tensor subclass; "
                                            "outputs must be plain torch.Tensor with real storage"))
            continue
        if out.is_meta or out.layout != torch.strided:
            problems.append(("lazy_output", f"output {i} has no materialised strided storage"))
            continue
        span = _storage_range(out)
        if span[1] > span[0] and any(a < span[1] and span[0] < b for a, b in input_ranges):
            problems.append(("output_aliases_input", f"output {i} shares memory with an input"))
    return problems


def _storage_range(t: torch.Tensor) -> tuple[int, int]:
    try:
        storage = t.untyped_storage()
        return storage.data_ptr(), storage.data_ptr() + storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return 0, 0
