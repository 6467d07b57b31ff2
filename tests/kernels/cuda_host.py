"""Checks of a CUDA reference kernel that need no GPU: capture what it passes to `load_inline`,
and syntax-check the host wrapper (`cpp_sources`) with g++ against torch's headers.

The evaluator's compile-only verdict compiles the CUDA sources with nvcc; the host wrapper is
only built by `load_inline` on a GPU machine. A CPU-only torch lacks one generated CUDA header
(`c10/cuda/impl/cuda_cmake_macros.h`), so a stub stands in for it; CUDA's own headers come from
the local toolkit.
"""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class _Captured(Exception):
    pass


@dataclass
class LoadInlineCall:
    name: str = ""
    cpp_sources: list[str] = field(default_factory=list)
    cuda_sources: list[str] = field(default_factory=list)
    functions: Any = None
    extra_cuda_cflags: list[str] = field(default_factory=list)


def capture_load_inline(source: str) -> LoadInlineCall:
    """Execute a kernel module up to its `load_inline` call and return that call's arguments."""
    from torch.utils import cpp_extension

    call = LoadInlineCall()

    def fake(name: str, cpp_sources: Any = (), cuda_sources: Any = (), functions: Any = None,
             extra_cuda_cflags: Any = None, **_: Any) -> Any:
        call.name = name
        call.cpp_sources = [cpp_sources] if isinstance(cpp_sources, str) else list(cpp_sources or [])
        call.cuda_sources = [cuda_sources] if isinstance(cuda_sources, str) else list(cuda_sources or [])
        call.functions = functions
        call.extra_cuda_cflags = list(extra_cuda_cflags or [])
        raise _Captured

    original = cpp_extension.load_inline
    cpp_extension.load_inline = fake
    try:
        exec(compile(source, "<kernel>", "exec"), {"__name__": "captured_kernel"})
    except _Captured:
        return call
    finally:
        cpp_extension.load_inline = original
    raise AssertionError("the kernel module never calls load_inline")


def cuda_include_dir() -> Path | None:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    for root in (Path(nvcc).resolve().parent.parent, Path("/usr/local/cuda")):
        if (root / "include" / "cuda_runtime_api.h").is_file():
            return root / "include"
    return None


def _module_defs(call: LoadInlineCall, prefix: str = "") -> list[str]:
    functions = call.functions if isinstance(call.functions, list | tuple) else [call.functions]
    return [f'm.def("{prefix}{f}", torch::wrap_pybind_function({prefix}{f}), "{f}");' for f in functions if f]


def _syntax_only(text: str) -> tuple[bool, str]:
    """g++ -fsyntax-only of `text` against torch's headers (and CUDA's, and Python's)."""
    from torch.utils import cpp_extension

    cuda_include = cuda_include_dir()
    if cuda_include is None or shutil.which("g++") is None:
        return False, "no CUDA toolkit headers or no g++"
    with tempfile.TemporaryDirectory(prefix="kernel-host-") as tmp:
        stub = Path(tmp) / "stub" / "c10" / "cuda" / "impl"
        stub.mkdir(parents=True)
        (stub / "cuda_cmake_macros.h").write_text("#pragma once\n")
        (Path(tmp) / "main.cpp").write_text(text)
        command = ["g++", "-fsyntax-only", "-std=c++17", "-DTORCH_EXTENSION_NAME=kernel_host_check",
                   *[f"-I{p}" for p in cpp_extension.include_paths()], f"-I{Path(tmp) / 'stub'}",
                   f"-I{cuda_include}", f"-I{sysconfig.get_paths()['include']}", "-w", "main.cpp"]
        proc = subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=900)
    return proc.returncode == 0, proc.stdout + proc.stderr


def host_syntax_check(call: LoadInlineCall) -> tuple[bool, str]:
    """g++ -fsyntax-only of the main.cpp that load_inline would build (torch/extension.h, the
    cpp sources, the pybind module); (ok, compiler output)."""
    text = "#include <torch/extension.h>\n" + "\n".join(call.cpp_sources)
    module = "\n".join(_module_defs(call))
    return _syntax_only(text + f"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{module}\n}}\n")


def host_syntax_check_many(calls: dict[str, LoadInlineCall]) -> dict[str, tuple[bool, str]]:
    """`host_syntax_check` of many wrappers in one g++ run: torch's headers, which take nearly all
    of a check's 20-150 s, are parsed once. Each wrapper sits in a namespace of its own behind a
    `#line` naming it (its `#include`s hoisted to the top), so an error names its kernel; a kernel
    named by an error is checked again alone, and only that verdict counts, so that no kernel is
    failed for a neighbour's error."""
    includes: list[str] = ["#include <torch/extension.h>"]
    bodies, defs = [], []
    for i, (name, call) in enumerate(calls.items()):
        lines = "\n".join(call.cpp_sources).splitlines()
        for line in lines:
            if line.lstrip().startswith("#include") and line.strip() not in includes:
                includes.append(line.strip())
        kept = ["" if line.lstrip().startswith("#include") else line for line in lines]
        bodies.append(f'namespace kernel_{i} {{\n#line 1 "{name}"\n' + "\n".join(kept) + "\n}\n")
        defs += _module_defs(call, prefix=f"kernel_{i}::")
    text = "\n".join(includes) + "\n" + "".join(bodies)
    text += '#line 1 "pybind-module"\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n' + "\n".join(defs) + "\n}\n"
    ok, log = _syntax_only(text)
    verdicts = {name: (True, "") for name in calls}
    if ok:
        return verdicts
    blamed = [name for name in calls if f"{name}:" in log]
    if not blamed:  # an error no wrapper's line explains: check each alone
        blamed = list(calls)
    for name in blamed:
        verdicts[name] = host_syntax_check(calls[name])
    return verdicts
