"""What the compiler says about a CUDA kernel, without a GPU: resources and SASS.

Call these:

- `compile_cuda_report(source, arch="sm_90a", extra_flags=(), ...) -> CudaCompileReport`, a
  named tuple `(ok, log, resources, histogram)`: compile `source` to a cubin with
  `nvcc -cubin -arch=<arch> -Xptxas -v`, parse ptxas's report into `KernelResources` per kernel
  and disassemble the cubin into a SASS opcode histogram. Never raises; `ok` is False with the
  reason in `log` when nvcc is missing, fails or times out. Sources that include torch headers
  (KernelBench's load_inline answers) need `extra_flags=torch_extension_flags()`; those compile
  slowly (~30 s of CPU), so cache by source hash.
- `torch_extension_flags() -> list[str]`: `-I` for torch's and Python's headers, `-std=c++17`.
- `parse_ptxas(log, demangler=None) -> tuple[KernelResources, ...]`: ptxas `-v` /
  `--resource-usage` output (registers, shared, stack frame, spill stores/loads, constant bank).
- `sass_histogram(cubin, ...) -> dict[str, int]` (cuobjdump -sass, else nvdisasm -c) and
  `parse_sass(text)`: opcode with its modifiers ("LDG.E.128") -> count; NOPs (padding) dropped.
- `summarize_sass(histogram) -> dict`: derived facts (tensor cores, warpgroup MMA, 128-bit
  loads, local memory, shared memory, async copies, TMA, fp64).
- `find_cuda_tool(name, ...) -> str | None`: nvcc, cuobjdump, nvdisasm, cu++filt: an explicit
  path, PATH, the CUDA installs (/usr/local/cuda*/bin), then NVIDIA's PyPI wheels
  (`nvidia-cuda-cuobjdump`, `nvidia-cuda-nvdisasm` put them under site-packages/nvidia/*/bin).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from agentforge.evaluator.result import KernelResources

_CUDA_DIRS = ("/usr/local/cuda/bin", "/usr/local/cuda-*/bin", "/opt/cuda/bin")


class CudaCompileReport(NamedTuple):
    ok: bool
    log: str
    resources: tuple[KernelResources, ...]
    histogram: dict[str, int]


# ----- finding the tools --------------------------------------------------------------------
def _wheel_bin_dirs() -> list[Path]:
    """bin folders of NVIDIA's PyPI wheels (nvidia/cu13/bin, nvidia/cuda_nvcc/bin, ...)."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return sorted(p for loc in spec.submodule_search_locations for p in Path(loc).glob("*/bin") if p.is_dir())


def find_cuda_tool(name: str, tool_path: str | None = None, search_path: str | None = None) -> str | None:
    """`tool_path` if it exists; else `name` on `search_path` (None: the process PATH); else the
    newest CUDA install that has it; else an NVIDIA PyPI wheel's copy."""
    if tool_path:
        return tool_path if Path(tool_path).is_file() else None
    found = shutil.which(name, path=search_path)
    if found:
        return found
    dirs: list[Path] = []
    for pattern in _CUDA_DIRS:
        dirs += sorted(Path("/").glob(pattern.lstrip("/")), reverse=True)
    for folder in [*dirs, *_wheel_bin_dirs()]:
        candidate = folder / name
        if candidate.is_file():
            return str(candidate)
    return None


# ----- ptxas --------------------------------------------------------------------------------
_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[\d+\]")


def parse_ptxas(log: str, demangler: str | None = None) -> tuple[KernelResources, ...]:
    """One `KernelResources` per entry function (kernel) in ptxas's verbose report, in order.

    Device functions that ptxas reports separately are not kernels and are left out. A kernel
    compiled for several architectures appears once per architecture, named "name [sm_XX]".
    With `demangler` (a c++filt / cu++filt path), C++ names are demangled."""
    fields: dict[tuple[str, str], dict[str, int]] = {}
    frames: dict[str, tuple[int, int, int]] = {}
    entry: tuple[str, str] | None = None
    current_props = ""
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            entry = (m.group(1), m.group(2))
            fields.setdefault(entry, {})
        elif m := _PROPS.search(line):
            props_for = m.group(1)
            if entry is None or entry[0] != props_for:
                entry = None  # a device function's properties, not the kernel's
            current_props = props_for
        elif m := _FRAME.search(line):
            frames[current_props] = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED.search(line)) and entry is not None:
            fields[entry]["registers"] = int(m.group(1))
            if s := _SMEM.search(line):
                fields[entry]["shared_bytes"] = int(s.group(1))
            cmem = [int(c) for c in _CMEM.findall(line)]
            if cmem:
                fields[entry]["constant_bytes"] = sum(cmem)
    archs = {arch for _, arch in fields}
    names = demangle([name for name, _ in fields], demangler) if demangler else {}
    resources = []
    for (name, arch), values in fields.items():
        stack, spill_st, spill_ld = frames.get(name, (None, None, None))
        label = names.get(name, name) + (f" [{arch}]" if len(archs) > 1 else "")
        resources.append(KernelResources(
            name=label, registers=values.get("registers"),
            shared_bytes=values.get("shared_bytes", 0 if "registers" in values else None),
            stack_bytes=stack, spill_store_bytes=spill_st, spill_load_bytes=spill_ld,
            constant_bytes=values.get("constant_bytes"),
        ))
    return tuple(resources)


def demangle(names: Iterable[str], demangler: str) -> dict[str, str]:
    """mangled -> readable for the `_Z...` names, through one call of c++filt / cu++filt;
    names it cannot read (or a failing demangler) map to themselves."""
    mangled = sorted({n for n in names if n.startswith("_Z")})
    if not mangled:
        return {}
    try:
        proc = subprocess.run([demangler], input="\n".join(mangled) + "\n", capture_output=True,
                              text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    out = proc.stdout.splitlines()
    if proc.returncode != 0 or len(out) != len(mangled):
        return {}
    return dict(zip(mangled, out, strict=True))


# ----- SASS ---------------------------------------------------------------------------------
_SASS_LINE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")
_FUNCTION = re.compile(r"^\s*(?:Function : (\S+)|\.text\.(\S+):)")


def parse_sass_by_function(text: str) -> dict[str, dict[str, int]]:
    """Opcode histograms per function, from `cuobjdump -sass` or `nvdisasm -c` output."""
    by_function: dict[str, Counter[str]] = {}
    current = Counter[str]()
    for line in text.splitlines():
        if m := _FUNCTION.match(line):
            current = by_function.setdefault(m.group(1) or m.group(2), Counter())
        elif (m := _SASS_LINE.match(line)) and m.group(1) != "NOP":
            current[m.group(1)] += 1
    return {name: dict(counts) for name, counts in by_function.items()}


def parse_sass(text: str) -> dict[str, int]:
    """Opcode (with modifiers) -> count, over every function in the listing."""
    total: Counter[str] = Counter()
    for counts in parse_sass_by_function(text).values():
        total.update(counts)
    return dict(total)


def sass_histogram(cubin: str | Path, cuobjdump: str | None = None, nvdisasm: str | None = None,
                   search_path: str | None = None) -> dict[str, int]:
    """The cubin's opcode histogram; {} when neither disassembler is found or both fail."""
    tools = (("cuobjdump", cuobjdump, ["-sass"]), ("nvdisasm", nvdisasm, ["-c"]))
    for name, explicit, flags in tools:
        binary = find_cuda_tool(name, explicit, search_path)
        if binary is None:
            continue
        try:
            proc = subprocess.run([binary, *flags, str(cubin)], capture_output=True, text=True,
                                  timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if proc.returncode == 0:
            return parse_sass(proc.stdout)
    return {}


_TENSOR_BASES = {"HMMA", "IMMA", "DMMA", "BMMA", "QMMA", "OMMA", "HGMMA", "IGMMA", "QGMMA", "BGMMA"}


def _base(opcode: str) -> str:
    return opcode.split(".", 1)[0]


def summarize_sass(histogram: dict[str, int]) -> dict[str, bool | int]:
    """What a kernel engineer looks for first in the SASS histogram."""
    def count(pred) -> int:
        return sum(n for op, n in histogram.items() if pred(op))

    def tensor(op: str) -> bool:  # UTC*MMA: Blackwell's tcgen05 MMAs
        return _base(op) in _TENSOR_BASES or (_base(op).startswith("UTC") and "MMA" in _base(op))

    global_loads = count(lambda op: _base(op) == "LDG")
    return {
        "instructions": sum(histogram.values()),
        "tensor_core_ops": count(tensor),
        "tensor_cores": count(tensor) > 0,
        "warpgroup_mma": count(lambda op: _base(op).endswith("GMMA")) > 0,
        "global_loads": global_loads,
        "global_loads_128bit": count(lambda op: _base(op) == "LDG" and ".128" in op),
        "vectorized_loads": count(lambda op: _base(op) == "LDG" and (".128" in op or ".64" in op)) > 0,
        "local_memory_ops": count(lambda op: _base(op) in ("LDL", "STL")),
        "local_memory": count(lambda op: _base(op) in ("LDL", "STL")) > 0,
        "shared_memory_ops": count(lambda op: _base(op) in ("LDS", "STS", "LDSM", "STSM")),
        "async_copy": count(lambda op: _base(op) == "LDGSTS") > 0,
        "tma": count(lambda op: _base(op).startswith("UTMA")) > 0,
        "barriers": count(lambda op: _base(op) == "BAR"),
        "fp64_ops": count(lambda op: _base(op) in ("DFMA", "DADD", "DMUL")),
    }


# ----- the whole report ---------------------------------------------------------------------
def torch_extension_flags() -> list[str]:
    """nvcc flags that let a `#include <torch/extension.h>` source compile to a cubin."""
    import sysconfig

    from torch.utils.cpp_extension import include_paths

    includes = [*include_paths(), sysconfig.get_paths()["include"]]
    return [f"-I{path}" for path in includes] + ["-std=c++17"]


def compile_cuda_report(
    source: str,
    arch: str = "sm_90a",
    extra_flags: Sequence[str] = (),
    nvcc: str | None = None,
    search_path: str | None = None,
    workdir: str | Path | None = None,
    timeout_s: float = 300.0,
) -> CudaCompileReport:
    """Compile `source` to a cubin for `arch`; resources from ptxas, histogram from the cubin.
    `workdir` keeps the .cu and .cubin (default: a temporary folder, removed)."""
    binary = find_cuda_tool("nvcc", nvcc, search_path)
    if binary is None:
        return CudaCompileReport(False, "nvcc not found on PATH or in a CUDA install", (), {})
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        return _compile_in(Path(workdir), binary, source, arch, extra_flags, search_path, timeout_s)
    with tempfile.TemporaryDirectory(prefix="agentforge-cubin-") as tmp:
        return _compile_in(Path(tmp), binary, source, arch, extra_flags, search_path, timeout_s)


def _compile_in(folder: Path, nvcc: str, source: str, arch: str, extra_flags: Sequence[str],
                search_path: str | None, timeout_s: float) -> CudaCompileReport:
    src, cubin = folder / "kernel.cu", folder / "kernel.cubin"
    src.write_text(source)
    cmd = [nvcc, "-cubin", f"-arch={arch}", "-Xptxas", "-v", *extra_flags, "-o", str(cubin), str(src)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=folder, check=False)
    except subprocess.TimeoutExpired:
        return CudaCompileReport(False, f"nvcc timed out after {timeout_s:g} s", (), {})
    except OSError as exc:
        return CudaCompileReport(False, f"nvcc could not be started: {exc}", (), {})
    log = (proc.stdout + proc.stderr).strip()
    demangler = find_cuda_tool("cu++filt", search_path=search_path) or shutil.which(
        "c++filt", path=search_path)
    resources = parse_ptxas(log, demangler)
    if proc.returncode != 0 or not cubin.is_file():
        return CudaCompileReport(False, log, resources, {})
    histogram = sass_histogram(cubin, search_path=search_path)
    if not histogram:
        log += "\n[agentforge] no SASS histogram: cuobjdump / nvdisasm not found (see docs/hardware.md)"
    return CudaCompileReport(True, log, resources, histogram)
