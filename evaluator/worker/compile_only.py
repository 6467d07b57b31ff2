"""A build verdict for CUDA candidates on a machine without a GPU.

While the candidate module executes, `load_inline` is replaced by `capture_load_inline`, which
runs torch's own JIT build of the extension up to the link, then stops the module: nothing can
run without a GPU. torch writes the sources (main.cpp with `torch/extension.h`, the candidate's
`cpp_sources` and the pybind module it generates for `functions`; cuda.cu with its implicit
headers) and the ninja file, with its flags for the installed torch: `-std=c++20`,
`COMMON_NVCC_FLAGS` (`-D__CUDA_NO_HALF_OPERATORS__`, `-D__CUDA_NO_BFLOAT16_CONVERSIONS__`, ...),
its include paths. ninja then compiles both objects with torch's own commands, for the job's
architecture (default sm_90a) plus `-Xptxas -v` for the resource report and `--keep` for the
cubin. So `float v = some_bf16;` or `__half + __half` fail here exactly as on the GPU.

The glue is compiled to a real object, not `-fsyntax-only`: the same command torch runs, so every
error g++ reports there (template instantiation, inline asm, code generation) is reported here,
and its symbols can be checked. Its one addition is the precompiled `torch/extension.h` that the
sandbox's parent prebuilds for the flag set (`header_prebuild`), first on the include path: g++
then needs a third of its CPU time, and most published answers that fail, fail in main.cpp.
The header is read only when ready, never built here; g++ itself refuses one that does not fit
the command. The link is not run (a CPU-only torch has no libtorch_cuda), but what it would leave
for the import to fail on is checked: every function of the candidate's own (global namespace or a
namespace its sources declare) that one object calls must be defined by the other or by torch's
libraries, or `import` would fail with "undefined symbol" on the GPU.

The lean `load_cuda` path (`make_lean_capture`) compiles its torch-free source with the flags the
GPU run uses (`compile_cuda_source`), then stops the same way.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentforge.evaluator import build_cache
from agentforge.evaluator.cuda_source import missing_cuda_source as missing_cuda_source  # the pipeline's check
from agentforge.evaluator.native import BUILD_EVENTS, BuildError, BuildEvent, _as_list, _check_flags
from agentforge.evaluator.worker import api_drift

# The lean path's flags (no torch headers): the same on the GPU (`native.load_cuda`) and here.
NVCC_FLAGS = ("-O3", "-std=c++17", "--expt-relaxed-constexpr", "-Xptxas", "-v", "-lineinfo")
# What torch's CUDA wheels generate into c10/cuda/impl/ and a CPU wheel lacks (c10/cuda/CUDAMacros.h
# includes it): cmake's `#cmakedefine C10_CUDA_BUILD_SHARED_LIBS` of a shared-library build.
CUDA_CMAKE_MACROS = "c10/cuda/impl/cuda_cmake_macros.h"
CUDA_CMAKE_MACROS_TEXT = "#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n"


class CompileOnlyStop(Exception):
    """Raised after the CUDA sources compiled: the module cannot go further without a GPU."""


def find_nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@functools.cache
def cuda_home(nvcc: str) -> str | None:
    """The toolkit root nvcc itself uses (`TOP` in its dry run): the nvcc on the path may be a
    wrapper script, so its folder's parent is not always the toolkit."""
    try:
        proc = subprocess.run([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"^#\$ TOP=(.+)$", proc.stdout + proc.stderr, re.MULTILINE)
    return str(Path(match[1].strip()).resolve()) if match else None


@functools.cache
def _tool_id(tool: str) -> str:
    try:
        out = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return tool
    return f"{shutil.which(tool) or tool} {out.strip().splitlines()[-1] if out.strip() else ''}"


def _torch_includes() -> list[str]:
    """What `torch/extension.h` needs: torch's include folders and Python's headers."""
    import sysconfig

    from torch.utils import cpp_extension

    return [f"-I{p}" for p in [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]]


def _arch_flags(arch: str) -> list[str]:
    number = arch.removeprefix("sm_")
    return [f"-gencode=arch=compute_{number},code=sm_{number}"]


def compile_cuda_source(source: str, name: str, arch: str, extra_flags: list[str], torch_headers: bool = True,
                        ) -> tuple[bool, str, Path]:
    """nvcc -cubin of one translation unit (cached). Returns (ok, log, cubin path).

    The lean path (`torch_headers=False`): a kernel source that needs no `torch/extension.h`
    compiles in about a second. `torch_headers=True` only adds torch's include folders (a
    benchmark's device pass); a `load_inline` verdict is `compile_inline_extension`."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise BuildError("nvcc is not installed: no compile-only verdict possible", log="")
    flags = [*NVCC_FLAGS, *_arch_flags(arch), *extra_flags]
    _check_flags(flags)
    includes = _torch_includes() if torch_headers else []
    key = build_cache.build_key("nvcc-cubin", [source, *includes], flags, nvcc)
    target = build_cache.entry("nvcc-cubin", key)
    if target.ready:
        return True, (target.folder / "build.log").read_text(), target.folder / f"{name}.cubin"
    staging = build_cache.staging_dir("nvcc-cubin")
    (staging / f"{name}.cu").write_text(source)
    command = [nvcc, "-cubin", *flags, *includes, f"{name}.cu", "-o", f"{name}.cubin"]
    proc = subprocess.run(command, cwd=staging, capture_output=True, text=True, timeout=900)
    log = f"$ {' '.join(os.path.basename(c) if i == 0 else c for i, c in enumerate(command))}\n"
    log += proc.stdout + proc.stderr
    (staging / "build.log").write_text(log)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        return False, log, Path()
    build_cache.publish(staging, target)
    return True, log, target.folder / f"{name}.cubin"


@dataclass(frozen=True)
class InlineVerdict:
    ok: bool
    message: str  # what failed, "" when ok
    log: str
    cubin: Path | None
    cached: bool


def compile_inline_extension(name: str, cpp_sources: Sequence[str], cuda_sources: Sequence[str], functions: Any,
                             arch: str, extra_cflags: Sequence[str] = (), extra_cuda_cflags: Sequence[str] = (),
                             extra_ldflags: Sequence[str] = (), extra_include_paths: Sequence[str] = (),
                             **options: Any) -> InlineVerdict:
    """torch's JIT build of a `load_inline` extension with CUDA sources, up to the link (cached)."""
    _check_flags([*extra_cflags, *extra_cuda_cflags, *extra_ldflags])
    nvcc = find_nvcc()
    ninja = shutil.which("ninja")
    if nvcc is None or ninja is None:
        raise BuildError(f"{'nvcc' if nvcc is None else 'ninja'} is not installed: no compile-only verdict possible",
                         log="")
    import torch
    from torch.utils import cpp_extension

    cxx = cpp_extension.get_cxx_compiler()
    inputs = [*cpp_sources, "\0cuda\0", *cuda_sources, repr(functions), repr(sorted(options.items()))]
    flags = [arch, *extra_cflags, "|", *extra_cuda_cflags, "|", *extra_ldflags, "|", *extra_include_paths]
    key = build_cache.build_key("nvcc-inline", inputs, flags,
                                f"torch-{torch.__version__} {_tool_id(nvcc)} {_tool_id(cxx)} {_tool_id(ninja)}")
    target = build_cache.entry("nvcc-inline", key)
    if target.ready:
        failed = target.folder / "FAILED"
        log = (target.folder / "build.log").read_text()
        if failed.exists():  # a failure is a verdict too: the same source fails again at once
            return InlineVerdict(False, failed.read_text(), log, None, True)
        return InlineVerdict(True, "", log, target.folder / "kernel.cubin", True)
    staging = build_cache.staging_dir("nvcc-inline")
    try:
        verdict = _build_inline(staging, name, cpp_sources, cuda_sources, functions, arch, nvcc, ninja,
                                extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths, options)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if not verdict.ok:
        _publish_failure(staging, target, verdict)
        return verdict
    build_cache.publish(staging, target)
    return InlineVerdict(True, "", verdict.log, target.folder / "kernel.cubin", False)


def _publish_failure(staging: Path, target: build_cache.CacheEntry, verdict: InlineVerdict) -> None:
    """Keep a failed build's message and log (not its files) under its key."""
    for child in staging.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    (staging / "build.log").write_text(verdict.log)
    (staging / "FAILED").write_text(verdict.message)
    build_cache.publish(staging, target)


def _build_inline(staging: Path, name: str, cpp_sources: Sequence[str], cuda_sources: Sequence[str], functions: Any,
                  arch: str, nvcc: str, ninja: str, extra_cflags: Sequence[str], extra_cuda_cflags: Sequence[str],
                  extra_ldflags: Sequence[str], extra_include_paths: Sequence[str],
                  options: dict[str, Any]) -> InlineVerdict:
    from agentforge.evaluator import native

    sources = native.torch_inline_sources(staging, name, cpp_sources, cuda_sources, functions, **options)
    keep = staging / "keep"
    keep.mkdir()
    plan = torch_plan(staging, name, sources, arch, nvcc, keep, extra_cflags, extra_cuda_cflags, extra_ldflags,
                      extra_include_paths, with_cuda=bool(cuda_sources) or bool(options.get("with_cuda")))
    objects = sorted(plan.objects)
    pch_folder, pch_note = _main_pch(extra_cflags, extra_include_paths)
    extra = {o: [f"-I{pch_folder}"] for o, rule in plan.objects.items() if rule == "compile" and pch_folder}
    # main.cpp (precompiled header) usually fails long before nvcc ends; when the CUDA source holds
    # a construct current torch removed, nvcc's error is what names the replacement, so it runs on.
    drifted = api_drift.has_construct("\n".join(cuda_sources))
    finish = frozenset(o for o, rule in plan.objects.items() if rule == "cuda_compile" and drifted)
    log, failed = _compile_objects(staging, ninja, objects, extra_args=extra, finish=finish)
    log = f"precompiled header for main.cpp: {pch_note}\n{log}"
    if failed:
        what = {"compile": f"g++ failed to compile the cpp_sources of {name} (torch's main.cpp)",
                "cuda_compile": f"nvcc failed to compile {name} for {arch}"}
        message = "; ".join(what[plan.objects[o]] for o in failed) or f"ninja failed for {name}"
        return InlineVerdict(False, message, log, None, False)
    missing = unresolved_symbols([staging / o for o in objects], [*cpp_sources, *cuda_sources])
    if missing:
        log += "\nundefined after the link, so the import would fail:\n" + "\n".join(missing) + "\n"
        return InlineVerdict(False, f"{name} calls functions its sources do not define: {missing[0]}", log,
                             None, False)
    cubins = sorted(keep.glob(f"*{arch}*.cubin")) or sorted(keep.glob("*.cubin"))
    if cubins:
        shutil.copyfile(cubins[0], staging / "kernel.cubin")
    (staging / "build.log").write_text(log)
    shutil.rmtree(keep, ignore_errors=True)
    for o in objects:
        (staging / o).unlink(missing_ok=True)
    return InlineVerdict(True, "", log, staging / "kernel.cubin" if cubins else None, False)


def torch_plan(staging: Path, name: str, sources: Sequence[Path], arch: str, nvcc: str, keep: Path,
               extra_cflags: Sequence[str], extra_cuda_cflags: Sequence[str], extra_ldflags: Sequence[str],
               extra_include_paths: Sequence[str], with_cuda: bool) -> Any:
    """torch's ninja file for these sources (its flags), for `arch` only, with ptxas's report and
    nvcc's intermediates kept in `keep` (the cubin)."""
    from agentforge.evaluator import native

    try:
        return native.torch_build_plan(
            staging, name, sources, extra_cflags=extra_cflags, extra_ldflags=extra_ldflags,
            extra_cuda_cflags=[*extra_cuda_cflags, *_arch_flags(arch), "-Xptxas", "-v", "--keep", "--keep-dir",
                               str(keep)],
            extra_include_paths=[*_cpu_torch_shim(), *extra_include_paths], with_cuda=with_cuda,
            cuda_home=cuda_home(nvcc))
    except (OSError, TypeError, AttributeError) as exc:
        raise BuildError(f"torch's build plan for {name} could not be written: {exc}", log=str(exc)) from exc


def _main_pch(extra_cflags: Sequence[str], extra_include_paths: Sequence[str]) -> tuple[str | None, str]:
    """The precompiled `torch/extension.h` for main.cpp's g++ compile, if one is ready: the one the
    parent prebuilds for this flag set (`header_prebuild`, keyed by torch's main.cpp flags less the
    CPU-torch shim folder, which `torch/extension.h` never reads). Never built here: a miss
    compiles as torch does, and g++ itself refuses a header that does not fit its flags."""
    from agentforge.evaluator import native

    try:
        with tempfile.TemporaryDirectory(prefix="agentforge-plan-") as tmp:
            plan = native._inline_plan(Path(tmp), "pch_probe", True, list(extra_cflags), list(extra_include_paths))
            folder, note = native.extension_pch(plan, build=False)
    except Exception as exc:  # a faster build is never worth a failed one
        return None, f"none ({type(exc).__name__}: {exc})"
    return (str(folder) if folder else None), note


def _compile_objects(staging: Path, ninja: str, objects: list[str], timeout: float = 1800,
                     extra_args: dict[str, list[str]] | None = None,
                     finish: frozenset[str] = frozenset()) -> tuple[str, list[str]]:
    """Run torch's compile command for each object (read from its ninja file), all at once; the
    first that fails ends the others, since its error is the verdict (torch's ninja would wait
    minutes for nvcc to finish first), except the objects in `finish`, which run to their end
    (one whose error the verdict needs, say). `extra_args` go right after an object's compiler
    (the precompiled header's folder, first on the include path). Returns the log and the objects
    that failed."""
    running: dict[str, tuple[subprocess.Popen[bytes], Path, str]] = {}
    for obj in objects:
        listed = subprocess.run([ninja, "-t", "commands", obj], cwd=staging, capture_output=True, text=True,
                                timeout=60).stdout.strip().splitlines()
        if not listed:
            return f"ninja knows no command for {obj}\n", [obj]
        command = listed[-1]
        if extra_args and extra_args.get(obj):
            compiler, _, rest = command.partition(" ")
            command = " ".join([compiler, *(shlex.quote(a) for a in extra_args[obj]), rest])
        out = staging / f"{obj}.log"
        with open(out, "wb") as handle:
            running[obj] = (subprocess.Popen(["/bin/sh", "-c", command], cwd=staging, stdout=handle,
                                             stderr=subprocess.STDOUT, start_new_session=True), out, command)
    failed: list[str] = []
    deadline = time.monotonic() + timeout
    while any(proc.poll() is None for proc, _, _ in running.values()):
        failed = [o for o, (proc, _, _) in running.items() if proc.poll() not in (None, 0)]
        waited = [o for o in finish if o in running and running[o][0].poll() is None]
        if (failed and not waited) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    stopped = []
    for obj, (proc, _, _) in running.items():
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
            stopped.append(obj)
    failed = [o for o, (proc, _, _) in running.items() if o not in stopped and proc.returncode != 0]
    log = "".join(f"$ {cmd}\n{out.read_text(errors='replace')}" for _, out, cmd in running.values())
    if stopped:
        log += f"stopped at the first failure: {', '.join(stopped)}\n" if failed else "timed out\n"
        failed = failed or stopped
    return log, failed


def _kill_group(pgid: int) -> None:
    """SIGKILL every process of group `pgid`, one pid at a time: the worker's seccomp guard refuses
    a signal to a group (`killpg`), and allows one to a process the worker started."""
    for _ in range(20):  # a compiler driver may start a process while we look
        members = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"{entry.path}/stat") as stat:
                        fields = stat.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[2]) == pgid and fields[0] != "Z":
                    members.append(int(entry.name))
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _cpu_torch_shim() -> list[str]:
    """An include folder with the generated header a CPU-only torch lacks (none when torch has it)."""
    from torch.utils import cpp_extension

    if any((Path(p) / CUDA_CMAKE_MACROS).exists() for p in cpp_extension.include_paths()):
        return []
    key = build_cache.build_key("torch-shim", [CUDA_CMAKE_MACROS, CUDA_CMAKE_MACROS_TEXT], [], "")
    target = build_cache.entry("torch-shim", key)
    if not target.ready:
        staging = build_cache.staging_dir("torch-shim")
        (staging / CUDA_CMAKE_MACROS).parent.mkdir(parents=True)
        (staging / CUDA_CMAKE_MACROS).write_text(CUDA_CMAKE_MACROS_TEXT)
        build_cache.publish(staging, target)
    return [str(target.folder)]


def unresolved_symbols(objects: Sequence[Path], sources: Sequence[str]) -> list[str]:
    """Functions and variables of the candidate's own that the objects use and nobody defines:
    global-namespace C++ symbols and those in namespaces the sources declare, unless torch's
    libraries export them. Demangled, with the definitions of the same name that do exist."""
    defined: set[str] = set()
    used: set[str] = set()
    for obj in objects:
        for symbol, kind in _symbols(obj):
            (used if kind == "U" else defined).add(symbol)
    namespaces = set(re.findall(r"\bnamespace\s+([A-Za-z_]\w*)", "\n".join(sources)))
    own = [s for s in used - defined if _is_own(s, namespaces)]
    missing = [s for s in own if s not in _torch_exports()]
    if not missing:
        return []
    names = _demangle(sorted(missing) + sorted(defined))
    wanted, have = names[:len(missing)], names[len(missing):]
    lines = []
    for name in wanted:
        base = name.split("(")[0]
        alike = [h for h in have if h.split("(")[0] == base]
        lines.append(f"  {name}" + (f" (defined: {', '.join(alike)})" if alike else ""))
    return lines


def _is_own(symbol: str, namespaces: set[str]) -> bool:
    if re.match(r"_Z\d", symbol):
        return True
    match = re.match(r"_ZN[KVr]*(\d+)", symbol)
    if not match:
        return False
    start = match.end()
    return symbol[start:start + int(match[1])] in namespaces


def _symbols(path: Path) -> list[tuple[str, str]]:
    proc = subprocess.run(["nm", "--format=posix", str(path)], capture_output=True, text=True, timeout=120)
    found = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        if parts[1] in ("U", "w", "v"):
            found.append((parts[0], "U"))
        elif parts[1].isupper() or parts[1] == "u":  # a local (static) definition links nothing
            found.append((parts[0], "D"))
    return found


@functools.cache
def _torch_exports() -> frozenset[str]:
    from torch.utils import cpp_extension

    libraries = sorted(str(p) for p in Path(cpp_extension.TORCH_LIB_PATH).glob("*.so"))
    proc = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", *libraries], capture_output=True,
                          text=True, timeout=300)
    return frozenset(line.split()[0] for line in proc.stdout.splitlines() if len(line.split()) >= 2)


def _demangle(symbols: list[str]) -> list[str]:
    if not symbols:
        return []
    try:
        proc = subprocess.run(["c++filt"], input="\n".join(symbols) + "\n", capture_output=True, text=True,
                              timeout=60)
        names = proc.stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return symbols
    return names if len(names) == len(symbols) else symbols


def make_capture(arch: str):
    """A `load_inline` stand-in that runs torch's build up to the link, then stops the module."""

    def capture_load_inline(name: str, cpp_sources: Any = (), cuda_sources: Any = (), functions: Any = None,
                            extra_cflags: Any = None, extra_cuda_cflags: Any = None, extra_ldflags: Any = None,
                            extra_include_paths: Any = None, **kwargs: Any) -> Any:
        cpp, cuda = _as_list(cpp_sources), _as_list(cuda_sources)
        if not cuda:
            raise BuildError("compile-only CUDA verdict: the candidate passes no cuda_sources to load_inline",
                             log="")
        options = {k: kwargs[k] for k in ("with_pytorch_error_handling", "no_implicit_headers") if k in kwargs}
        started = time.perf_counter()
        flags = (arch, *(extra_cflags or []), "|", *(extra_cuda_cflags or []), "|", *(extra_ldflags or []))
        event = BuildEvent("compile-only-nvcc", name, False, 0.0, False, "",
                           {"cpp": "\n".join(cpp), "cuda": "\n".join(cuda)}, flags)
        BUILD_EVENTS.append(event)
        verdict = compile_inline_extension(name, cpp, cuda, functions, arch, extra_cflags or [],
                                           extra_cuda_cflags or [], extra_ldflags or [], extra_include_paths or [],
                                           **options)
        event.ok, event.seconds, event.cached, event.log = (verdict.ok, time.perf_counter() - started,
                                                            verdict.cached, verdict.log)
        event.sources["cubin"] = str(verdict.cubin or "")
        if not verdict.ok:
            raise BuildError(verdict.message, verdict.log)
        raise CompileOnlyStop(name)

    return capture_load_inline


def make_lean_capture(arch: str):
    """A `native.load_cuda` stand-in for machines without a GPU: compile, then stop."""

    def capture_load_cuda(name: str, source: str, arch_override: str | None = None,
                          extra_cuda_cflags: Any = (), **_: Any) -> Any:
        started = time.perf_counter()
        ok, log, cubin = compile_cuda_source(source, name, arch_override or arch, list(extra_cuda_cflags),
                                             torch_headers=False)
        BUILD_EVENTS.append(BuildEvent("compile-only-nvcc", name, ok, time.perf_counter() - started, False, log,
                                       {"cuda": source, "cubin": str(cubin)}, (arch,)))
        if not ok:
            raise BuildError(f"nvcc failed to compile {name} for {arch}", log)
        raise CompileOnlyStop(name)

    return capture_load_cuda


@contextlib.contextmanager
def capture_redirected(arch: str) -> Iterator[None]:
    from agentforge.evaluator import native
    from torch.utils import cpp_extension

    native._torch_load_inline()  # saved before the swap: the capture builds through it
    originals = cpp_extension.load_inline, native.load_cuda
    cpp_extension.load_inline = make_capture(arch)
    native.load_cuda = make_lean_capture(arch)
    try:
        yield
    finally:
        cpp_extension.load_inline, native.load_cuda = originals

