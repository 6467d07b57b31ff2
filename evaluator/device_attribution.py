"""Whose kernels the device ran during timed calls (CUDA): the candidate's own, or torch's and its libraries'.

After the timed loop, a few extra timed calls run in the candidate worker under `torch.profiler`
with CUDA activity (CUPTI kernel, memcpy and memset records, kernel names as the demangler gives
them), and the worker sends back each kernel's name, device time and count (`serve`). The judge
attributes them (`attribute`), with what it reads itself:

- **own**: a kernel whose name is a function the candidate's own builds define: the ELF symbol
  tables (`.symtab`, `.dynsym`) of the shared objects mapped into the worker from the build cache
  (`own_symbols`; nvcc gives every `__global__` function a host stub of the kernel's own mangled
  name), demangled as CUPTI's names are; or a kernel the candidate's source defines by name
  (`own_source_kernels`: a `@triton.jit` function, a `__global__` function in a CUDA source
  string, for kernels that leave no shared object behind: NVRTC, CuPy, Triton).
- **torch**, **cublas**, **cudnn**, **cutlass**, **triton-torch** (kernels torch.compile generated),
  **runtime** (memcpy, memset), **other**: by name. Library names that honest code does not use
  (`at::`, `c10::`, `cub::` namespaces, cuBLAS's `nvjet`/`xmma`/`ampere_sgemm` families, anything
  naming cuBLAS or cuDNN, inductor's `triton_poi_` ...) win over an own symbol of the same name: a
  decoy kernel that borrows a library kernel's name does not earn its time. Generic names (`gemm`,
  `cutlass::`, `elementwise`) count as a library's only when no own build defines them (a
  candidate may instantiate CUTLASS templates in its own build).

The share of the profiled device time spent in own kernels is the profiling coverage; below the
task's `PROFILING_COVERAGE_FLOOR` (default `DEFAULT_FLOOR`) it is `torch_fallback`.

Imports only the standard library and torch (it runs in the judge and in the worker).
"""

from __future__ import annotations

import ast
import contextlib
import math
import os
import re
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from agentforge.evaluator.result import DeviceAttributionRecord

if TYPE_CHECKING:
    from agentforge.evaluator.protocol.messages import DeviceProfile

REPS = 5  # extra timed calls under the device profiler
MAX_REPS = 50
DEFAULT_FLOOR = 0.5
MAX_KERNELS = 200  # distinct kernel names a reply may carry (the rest summed into one entry)
MAX_SO_BYTES = 1 << 30
TOP = 12  # kernels kept in the verdict
ORIGINS = ("own", "torch", "cublas", "cudnn", "cutlass", "triton-torch", "runtime", "other")

# Names no honest candidate kernel carries: these win over an own symbol of the same name.
_STRICT: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("runtime", re.compile(r"^(Memcpy|Memset)\b")),
    ("triton-torch", re.compile(r"^triton_(poi|red|per|tem|for|unk)_")),
    ("cudnn", re.compile(r"cudnn|implicit_convolve|xmma_(fprop|dgrad|wgrad)|nchwToNhwc|nhwcToNchw", re.I)),
    ("cublas", re.compile(r"cublas|nvjet|xmma|^(ampere|volta|turing|maxwell|sm\d+)_[sdhcz]?gemm|"
                          r"^(gemv2[NT]_|gemvNSP|gemmSN_|gemmk1_|splitKreduce_)|^cutlass_\d+_", re.I)),
    ("torch", re.compile(r"^(at|c10|cub|at_cuda_detail|pytorch_flash|caffe2|torch|CUB_\w+)::|"
                         r"PyTorchMemEffAttention|fmha_cutlass")),
)
# Generic names: a library's only when no own build defines them.
_LOOSE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("cutlass", re.compile(r"^(cutlass|cute)::|cutlass", re.I)),
    ("cublas", re.compile(r"gemm|gemv|dot_kernel|axpy|scal_kernel", re.I)),
    ("torch", re.compile(r"elementwise_kernel|reduce_kernel|softmax_warp|flash_fwd|flash_bwd|"
                         r"CatArrayBatchedCopy|indexSelect|radixSort|gatherTopK")),
)


@dataclass(frozen=True)
class Kernel:
    """What the device ran under one name in the profiled calls."""

    name: str
    device_us: float
    count: int


def evidence(record: DeviceAttributionRecord) -> str | None:
    """`torch_fallback` evidence when the coverage is below the floor, else None."""
    if record.coverage is None or record.coverage >= record.floor:
        return None
    others = ", ".join(f"{o} {us / record.total_us:.0%}" for o, us in
                       sorted(record.by_origin.items(), key=lambda kv: -kv[1]) if o != "own" and us > 0)
    largest = "; ".join(f"{n[:120]} ({o}, {us:.1f} us)" for n, o, us, _ in record.kernels if o != "own")[:600]
    return (f"{record.coverage:.1%} of the device time in {record.calls} profiled timed calls ran in the candidate's "
            f"own kernels, below the task's floor of {record.floor:.0%} (profiling coverage; the rest: {others}; "
            f"largest: {largest})")


def describe(record: DeviceAttributionRecord) -> str:
    """One line for the timing record's notes."""
    if record.coverage is None:
        return f"device profile: no device time recorded in {record.calls} profiled calls {record.problem}".strip()
    parts = ", ".join(f"{o} {us / record.total_us:.0%}" for o, us in sorted(record.by_origin.items(),
                                                                           key=lambda kv: -kv[1]))
    return (f"device profile of {record.calls} extra timed calls: {record.total_us / record.calls:.1f} us of device "
            f"time per call; profiling coverage {record.coverage:.1%} (floor {record.floor:.0%}): {parts}")


# ----- worker side ------------------------------------------------------------------------------
def profile_calls(call: Callable[[], Any], reps: int) -> tuple[list[list[Any]], list[Any], str]:
    """`reps` calls under torch.profiler with CPU and CUDA activity (all threads), each in a candidate
    window and synchronised inside it: (the kernels [name, device us, count], the CPU events for the
    operator observer, why there are none when the profiler itself failed). A call that raises is
    the candidate's failure and raises here."""
    from agentforge.evaluator import op_observer
    from torch._C._profiler import _ExperimentalConfig
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.cuda.synchronize()
    try:
        profiler = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                           experimental_config=_ExperimentalConfig(profile_all_threads=True))
        profiler.start()
    except Exception as exc:
        return [], [], f"the device profiler did not start: {type(exc).__name__}: {str(exc)[:200]}"
    try:
        for _ in range(reps):
            with torch.no_grad(), record_function(op_observer.WINDOW):
                call()
                torch.cuda.synchronize()
    finally:
        with contextlib.suppress(Exception):
            profiler.stop()
    try:
        results = profiler.profiler.kineto_results
        raw = results.events() if results is not None else []
        # Device-side records only; record_function ranges mirrored on the device timeline (the
        # candidate window, or any annotation the candidate makes) are no device work.
        device = [(e.name(), e.duration_ns() / 1e3) for e in raw
                  if e.device_type() == torch.autograd.DeviceType.CUDA and not e.is_user_annotation()
                  and not e.name().startswith("agentforge::")]
        return kernel_totals(device), list(profiler.events() or []), ""
    except Exception as exc:
        return [], [], f"the device profile could not be read: {type(exc).__name__}: {str(exc)[:200]}"


def kernel_totals(records: Iterable[tuple[str, float]]) -> list[list[Any]]:
    """Per name: [name, device us, count], largest first; past MAX_KERNELS names, the rest as one
    entry named '(more kernels)'."""
    totals: dict[str, list[Any]] = {}
    for name, us in records:
        entry = totals.setdefault(str(name)[:500], [str(name)[:500], 0.0, 0])
        entry[1] += max(float(us), 0.0)
        entry[2] += 1
    ranked = sorted(totals.values(), key=lambda e: -e[1])
    if len(ranked) > MAX_KERNELS:
        rest = ranked[MAX_KERNELS - 1:]
        ranked = [*ranked[:MAX_KERNELS - 1], ["(more kernels)", sum(e[1] for e in rest), sum(e[2] for e in rest)]]
    return ranked


def serve(worker: Any, request: DeviceProfile) -> dict[str, Any]:
    """The worker's `device_profile` request: the model called `reps` times on the timing inputs under
    the device profiler. The worker's operator observer is paused for it (one profiler at a time) and
    the profile's own CPU events go to it instead, so these calls are observed like any other."""
    from agentforge.evaluator import op_observer

    model = worker.models[request.key]
    inputs = worker._arena_inputs(request)
    reps = max(1, min(request.reps, MAX_REPS))
    worker._observed()  # what the observer saw so far, attributed
    if worker.observer is not None:
        worker.observer.stop()
    try:
        kernels, events, problem = profile_calls(lambda: model(*inputs), reps)
        op_observer.attribute(events, worker.observed)
    finally:
        worker.observer = op_observer.start()
    return {"kernels": kernels, "calls": reps, "problem": problem}


# ----- judge side -------------------------------------------------------------------------------
def parse_reply(reply: dict[str, Any]) -> tuple[list[Kernel], int, str]:
    """The worker's kernels, its call count and why the profile failed ('' when it did not), read as
    hostile data: ValueError when malformed."""
    raw, calls, problem = reply.get("kernels"), reply.get("calls"), reply.get("problem", "")
    if not isinstance(raw, list) or len(raw) > MAX_KERNELS or type(calls) is not int or not 1 <= calls <= MAX_REPS \
            or not isinstance(problem, str):
        raise ValueError("the device profile is malformed")
    kernels = []
    for entry in raw:
        if not (isinstance(entry, list | tuple) and len(entry) == 3 and isinstance(entry[0], str)
                and isinstance(entry[1], int | float) and type(entry[2]) is int):
            raise ValueError("a kernel entry of the device profile is malformed")
        us = float(entry[1])
        if not math.isfinite(us) or us < 0 or entry[2] < 0:
            raise ValueError("a kernel's device time or count is not a finite non-negative number")
        kernels.append(Kernel(entry[0][:500], us, entry[2]))
    return kernels, calls, problem[:300]


def own_symbols(paths: Iterable[str | Path]) -> set[str]:
    """Match keys (`keys`) of every function the shared objects at `paths` define (their symbol
    tables, local symbols included, demangled); unreadable files give none."""
    found: set[str] = set()
    for path in paths:
        for symbol in elf_defined_functions(Path(path)):
            found |= keys(demangle(symbol))
    return found


_GLOBAL = re.compile(r"__global__\s+(?:(?:static|inline|__launch_bounds__\s*\([^)]*\)|void)\s*)+(\w+)\s*\(")


def own_source_kernels(source: str) -> set[str]:
    """Names of the kernels the candidate's source defines: functions it decorates with a Triton `jit`
    (directly, or under autotune/heuristics), and `__global__` functions in its strings."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if any("jit" in ast.unparse(d) for d in node.decorator_list):
                names.add(node.name)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "__global__" in node.value:
            names |= set(_GLOBAL.findall(node.value))
    return names


def classify(name: str, own: set[str], source_names: set[str]) -> str:
    """The origin of one kernel name (see the module's docstring): `own` holds the match keys of the
    candidate's built functions, `source_names` the kernel names its source defines."""
    for origin, pattern in _STRICT:
        if pattern.search(name) or pattern.search(qualified(name)):
            return origin
    if keys(name) & own or _triton_name(qualified(name).split("::")[-1]) in source_names:
        return "own"
    for origin, pattern in _LOOSE:
        if pattern.search(name):
            return origin
    return "other"


def attribute(kernels: list[Kernel], calls: int, own: set[str], source_names: set[str],
              floor: float = DEFAULT_FLOOR) -> DeviceAttributionRecord:
    """The profiled kernels' device time by origin, the coverage, and the largest kernels."""
    by_origin = dict.fromkeys(ORIGINS, 0.0)
    rows = []
    for k in kernels:
        origin = classify(k.name, own, source_names)
        by_origin[origin] += k.device_us
        rows.append((k.name, origin, round(k.device_us, 3), k.count))
    total = sum(by_origin.values())
    rows.sort(key=lambda r: -r[2])
    return DeviceAttributionRecord(calls=calls, total_us=round(total, 3), own_us=round(by_origin["own"], 3),
                       coverage=by_origin["own"] / total if total > 0 else None, floor=floor,
                       by_origin={k: round(v, 3) for k, v in by_origin.items() if v > 0}, kernels=tuple(rows[:TOP]))


def floor_for(task: Any) -> float:
    """The task's `PROFILING_COVERAGE_FLOOR` (a share in [0, 1]), or DEFAULT_FLOOR."""
    declared = getattr(task.module, "PROFILING_COVERAGE_FLOOR", None)
    if declared is None:
        return DEFAULT_FLOOR
    if isinstance(declared, bool) or not isinstance(declared, int | float) or not 0 <= declared <= 1:
        raise ValueError(f"task {task.name}: PROFILING_COVERAGE_FLOOR is {declared!r}; give a share between 0 and 1")
    return float(declared)


def judge(candidate: Any, buffers: list[Any], task: Any, source: str, cache_root: str | Path,
          reps: int = REPS) -> DeviceAttributionRecord:
    """The judge's side: `reps` extra calls of the worker's model (`candidate`, a RemoteModel) on the
    timing inputs `buffers` under the worker's device profiler, attributed with the worker's own
    builds (read here, from the files the judge sees mapped into it) and the candidate's `source`."""
    from agentforge.evaluator.protocol.messages import DeviceProfile, WorkerBroken

    floor = floor_for(task)
    fields, sent = candidate._arena_inputs(buffers)
    try:
        reply = candidate.client.send(DeviceProfile(key=candidate.key, reps=reps, **fields))
    finally:
        for shared in sent:
            with contextlib.suppress(OSError):
                os.close(shared.fd)
    try:
        kernels, calls, problem = parse_reply(reply)
    except ValueError as exc:
        raise WorkerBroken(str(exc)) from exc
    own = own_symbols(own_builds(candidate.client.libraries_since_setup(), cache_root))
    record = attribute(kernels, calls, own, own_source_kernels(source), floor)
    return replace(record, problem=problem) if problem else record


def own_builds(mapped: Iterable[str], cache_root: str | Path) -> list[str]:
    """The shared objects mapped into the worker that come from the build cache: the candidate's own."""
    root = str(Path(cache_root).resolve())
    return sorted(p for p in mapped if p.endswith(".so") and str(Path(p).resolve()).startswith(root + "/"))


# ----- names ------------------------------------------------------------------------------------
def demangle(symbol: str) -> str:
    """An Itanium-mangled name as `__cxa_demangle` writes it (what CUPTI's kernel names are); others as
    they are."""
    return torch._C._demangle(symbol) if symbol.startswith("_Z") else symbol


_ANON = "(anonymous namespace)"


def qualified(name: str) -> str:
    """The qualified function name of a demangled signature: no return type, template arguments or
    parameters (`void ns::k<float>(float*, long)` -> `ns::k`)."""
    head = _without_params(name.replace(_ANON, "{anon}"))
    out, depth = [], 0
    for ch in head:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip().split(" ")[-1].replace("{anon}", _ANON)


def keys(name: str) -> set[str]:
    """What a kernel name and an own symbol are matched on: the whole signature, and the name with its
    template arguments (no return type, no parameters), both without whitespace; for a name with no
    template arguments the bare name too (an `extern "C"` kernel has no signature)."""
    compact = re.sub(r"\s+", "", name)
    head = _without_params(name.replace(_ANON, "{anon}"))
    split = _last_top_level_space(head)
    named = re.sub(r"\s+", "", head[split + 1:]).replace("{anon}", _ANON)
    found = {compact, named}
    if "<" not in named:
        found.add(qualified(name))
    return {k for k in found if k}


def _without_params(name: str) -> str:
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == "(" and depth == 0 and i > 0:
            return name[:i]
    return name


def _last_top_level_space(text: str) -> int:
    depth, last = 0, -1
    for i, ch in enumerate(text):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif ch == " " and depth == 0:
            last = i
    return last


def _triton_name(name: str) -> str:
    """A Triton kernel's function name (older Triton suffixed a specialisation, `add_kernel_0d1d2d`)."""
    return re.sub(r"_(\d+[a-z]+)+$", "", name)


# ----- ELF symbol tables ------------------------------------------------------------------------
def elf_defined_functions(path: Path) -> list[str]:
    """Names of the functions a 64-bit little-endian ELF file defines (`.symtab` and `.dynsym`), read
    with the standard library; [] for anything else or anything unreadable."""
    try:
        if path.stat().st_size > MAX_SO_BYTES:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    try:
        return _symbols(data)
    except (struct.error, IndexError, ValueError):
        return []


def _symbols(data: bytes) -> list[str]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # ELF64, little-endian
        return []
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names: list[str] = []
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind not in (2, 11) or entsize != 24:  # SHT_SYMTAB, SHT_DYNSYM
            continue
        strtab = sections[link]
        str_off, str_size = strtab[4], strtab[5]
        for at in range(offset, offset + size, entsize):
            st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", data, at)
            if st_shndx == 0 or st_info & 0xF != 2 or not st_name or st_name >= str_size:  # defined FUNC
                continue
            end = data.index(b"\0", str_off + st_name)
            names.append(data[str_off + st_name:end].decode("utf-8", "replace"))
    return names
