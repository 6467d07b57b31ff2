"""Compile-only CUDA verdicts on a machine without a GPU, with the real nvcc and g++.

A `load_inline` candidate is built by torch's own JIT build (torch writes the sources and the ninja
file, with its flags for the installed torch) up to the link, for sm_90a: the verdict is `ok` at
the build stage with ptxas's resource report, and a broken source is a `compile_error` carrying the
compiler's message. torch's `COMMON_NVCC_FLAGS` forbid implicit bf16/half conversions and half
operators; those candidates must fail here exactly as torch's own build fails them, which these
tests check against torch's own `load_inline` (run on the local toolkit: a CPU-only torch has no
`CUDA_HOME`, so the probe names it; it then fails only at the link, for want of libtorch_cuda).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from agentforge.evaluator import build_cache, header_prebuild, native
from agentforge.evaluator.header_prebuild import FlagSet
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import EvalJob, Stage, Status
from agentforge.evaluator.worker import api_drift
from agentforge.evaluator.worker.compile_only import (
    _compile_objects,
    _cpu_torch_shim,
    _main_pch,
    compile_inline_extension,
    cuda_home,
    find_nvcc,
    torch_plan,
)
from agentforge.sandbox.worker import launch_worker

EXPLOITS = Path(__file__).resolve().parent.parent / "exploits"
CANDIDATES = Path(__file__).resolve().parent / "candidates"

pytestmark = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")

LEAN = '''
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    __shared__ float tile[256];
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < n ? x[i] : 0.f;
    __syncthreads();
    if (i < n) y[i] = tile[threadIdx.x] > 0.f ? tile[threadIdx.x] : 0.f;
}
void launch(const float* x, float* y, long n) { relu_kernel<<<(n + 255) / 256, 256>>>(x, y, n); }
"""
CPP = "void launch(const float* x, float* y, long n);"
_ext = load_inline("lean_relu", cpp_sources=CPP, cuda_sources=CUDA, functions=["launch"])


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        _ext.launch(x.data_ptr(), y.data_ptr(), x.numel())
        return y
'''

# LEAN with no torch header in cuda.cu (its own `#include <torch/extension.h>` in the glue, which the
# generated bindings need): the same two objects, but nvcc takes seconds instead of a minute of torch's
# headers. For the tests whose point is the glue or nvcc's error, not the KernelBench header.
LEAN_LIGHT = LEAN.replace(
    'load_inline("lean_relu", cpp_sources=CPP, cuda_sources=CUDA, functions=["launch"])',
    'load_inline("lean_relu", cpp_sources="#include <torch/extension.h>\\n" + CPP, cuda_sources=CUDA, '
    'functions=["launch"], no_implicit_headers=True)')
assert LEAN_LIGHT != LEAN

# load_inline calls whose CUDA source needs no torch header (`no_implicit_headers`), so torch's
# build and this one take seconds: what they test is the flags. Each wrong one has its right twin.
WIDEN = """#include <cuda_bf16.h>
__global__ void widen(const __nv_bfloat16* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float v = %s; y[i] = 2.f * v; }
}
"""
ADD = """#include <cuda_fp16.h>
__global__ void add(const __half* a, const __half* b, __half* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = %s;
}
"""
CALLS = {
    "bf16_implicit": {"name": "bf16_implicit", "cuda_sources": WIDEN % "x[i]"},
    "bf16_explicit": {"name": "bf16_explicit", "cuda_sources": WIDEN % "__bfloat162float(x[i])"},
    "half_operator": {"name": "half_operator", "cuda_sources": ADD % "a[i] + b[i]"},
    "half_intrinsic": {"name": "half_intrinsic", "cuda_sources": ADD % "__hadd(a[i], b[i])"},
}
TORCH_OWN_BUILD = """
import json, os, sys
os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0a"
from torch.utils import cpp_extension
cpp_extension.CUDA_HOME = sys.argv[1]
try:
    cpp_extension.load_inline(build_directory=sys.argv[3], verbose=True, **json.loads(sys.argv[2]))
except RuntimeError as exc:
    print("build failed:", exc)
"""
NVCC_ERROR = re.compile(r"cuda\.cu\(\d+\): error: .*")


@pytest.fixture
def fresh_cache(tmp_path: Path) -> Iterator[Path]:
    build_cache.set_cache_root(tmp_path)
    yield tmp_path
    build_cache.set_cache_root(None)


def job(candidate: str, cache: Path, task: str = "elementwise_relu") -> EvalJob:
    return EvalJob(task_name=task, task_source=(EXPLOITS / "tasks" / f"{task}.py").read_text(),
                   candidate_source=candidate, backend="cuda", device="cpu", cuda_arch="sm_90a",
                   cache_dir=str(cache))


def module_calling(call: dict) -> str:
    """A KernelBench answer module whose load_inline call is `call` (plus an empty glue)."""
    return (f"import json\nfrom torch import nn\nfrom torch.utils.cpp_extension import load_inline\n"
            f"_ext = load_inline(cpp_sources='', no_implicit_headers=True, **json.loads({json.dumps(call)!r}))\n"
            "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n")


def torch_own_build(call: dict, folder: Path) -> str:
    """torch's own load_inline of `call` on the local toolkit: its ninja output."""
    spec = {"cpp_sources": "", "no_implicit_headers": True, **call}
    folder.mkdir()
    done = subprocess.run([sys.executable, "-c", TORCH_OWN_BUILD, cuda_home(find_nvcc()), json.dumps(spec),
                           str(folder)], capture_output=True, text=True, timeout=600)
    return done.stdout + done.stderr


@pytest.mark.parametrize("wrong", ["bf16_implicit", "half_operator"])
def test_what_torchs_flags_forbid_fails_as_torchs_own_build_fails_it(fresh_cache: Path, tmp_path: Path,
                                                                     wrong: str) -> None:
    result = run_pipeline(job(module_calling(CALLS[wrong]), fresh_cache), launch_worker)
    assert result.status == Status.COMPILE_ERROR and result.stage == Stage.BUILD, result.summary()
    assert result.error is not None and "nvcc failed" in result.error.message
    ours = set(NVCC_ERROR.findall(result.error.traceback_tail))
    theirs = set(NVCC_ERROR.findall(torch_own_build(CALLS[wrong], tmp_path / "torch")))
    assert ours and ours == theirs  # the same errors, on the same lines
    assert "-D__CUDA_NO_HALF_OPERATORS__" in result.compile.log_tail  # torch's flags, as torch passes them


@pytest.mark.parametrize("right", ["bf16_explicit", "half_intrinsic"])
def test_their_explicit_twins_compile_here_and_in_torchs_own_build(fresh_cache: Path, tmp_path: Path,
                                                                   right: str) -> None:
    result = run_pipeline(job(module_calling(CALLS[right]), fresh_cache), launch_worker)
    assert result.status == Status.OK and result.stage == Stage.BUILD, result.summary()
    assert result.compile.arch == "sm_90a" and result.compile.resources
    own = torch_own_build(CALLS[right], tmp_path / "torch")
    # torch compiles both objects too; its link then wants libtorch_cuda, which a CPU torch lacks.
    assert not NVCC_ERROR.findall(own) and "-o cuda.cuda.o" in own and "FAILED: cuda.cuda.o" not in own


def test_the_lean_load_cuda_path_compiles_for_sm90a_and_stops(fresh_cache: Path) -> None:
    result = run_pipeline(job((CANDIDATES / "relu_load_cuda.py").read_text(), fresh_cache), launch_worker)
    assert result.status == Status.OK and result.stage == Stage.BUILD, result.summary()
    assert result.compile.path == "compile-only-nvcc" and result.compile.arch == "sm_90a"
    (kernel,) = result.compile.resources
    assert kernel.name == "relu" and kernel.registers and kernel.spill_store_bytes == 0
    assert not result.accepted  # nothing ran


def test_a_verdict_is_cached_by_its_sources_and_flags(fresh_cache: Path) -> None:
    call = CALLS["bf16_explicit"]
    first = compile_inline_extension("twice", [""], [call["cuda_sources"]], None, "sm_90a", no_implicit_headers=True)
    again = compile_inline_extension("twice", [""], [call["cuda_sources"]], None, "sm_90a", no_implicit_headers=True)
    other = compile_inline_extension("twice", [""], [call["cuda_sources"]], None, "sm_90a", ["-DX=1"],
                                     no_implicit_headers=True)
    assert first.ok and not first.cached and again.ok and again.cached and not other.cached
    assert again.cubin is not None and again.cubin.exists()


@pytest.mark.slow
def test_a_cuda_candidate_compiles_for_sm90a_with_its_resources(fresh_cache: Path) -> None:
    """The KernelBench shape: torch's implicit torch/types.h in cuda.cu, torch/extension.h and the
    generated pybind module in main.cpp (30-90 s of nvcc and g++ on two cores)."""
    result = run_pipeline(job(LEAN, fresh_cache), launch_worker)
    assert result.status == Status.OK and result.stage == Stage.BUILD, result.summary()
    assert result.compiled and not result.accepted  # nothing ran: no correctness, so not accepted
    assert result.compile is not None and result.compile.arch == "sm_90a"
    assert result.compile.path == "compile-only-nvcc"
    assert "sm_90a" in result.compile.log_tail and "main.o" in result.compile.log_tail  # the glue was built
    (kernel,) = [r for r in result.compile.resources if "relu_kernel" in r.name]
    assert kernel.registers is not None and kernel.registers > 0
    assert kernel.shared_bytes == 1024


@pytest.mark.slow
def test_a_broken_cuda_source_is_a_compile_error_with_the_compilers_message(fresh_cache: Path) -> None:
    broken = LEAN_LIGHT.replace("tile[threadIdx.x] = i < n", "tile[threadIdx.x] = undeclared_name + (i < n")
    result = run_pipeline(job(broken, fresh_cache), launch_worker)
    assert result.status == Status.COMPILE_ERROR and result.stage == Stage.BUILD, result.error
    assert result.error is not None and "nvcc failed" in result.error.message
    assert result.compile is not None and not result.compile.ok
    assert "undeclared_name" in result.compile.log_tail and "error" in result.compile.log_tail
    assert "undeclared_name" in result.error.traceback_tail


@pytest.mark.slow
def test_broken_cpp_glue_is_a_compile_error_from_gxx(fresh_cache: Path) -> None:
    """The glue binds a function its cpp_sources never declare: g++ fails on main.cpp (torch's
    generated `m.def("launch_relu", ...)`), as torch's build does on a GPU machine."""
    broken = LEAN.replace('functions=["launch"]', 'functions=["launch_relu"]')
    result = run_pipeline(job(broken, fresh_cache), launch_worker)
    assert result.status == Status.COMPILE_ERROR and result.stage == Stage.BUILD, result.summary()
    assert "g++ failed to compile the cpp_sources" in result.error.message
    assert "nvcc failed" not in result.error.message  # the CUDA side was fine
    assert re.search(r"main\.cpp:\d+:\d+: error: .*launch_relu", result.error.traceback_tail)


@pytest.mark.slow
def test_a_glue_declaration_the_cuda_side_does_not_define_fails_before_the_import_would(fresh_cache: Path) -> None:
    """Both objects compile, but main.cpp calls launch(const float*, float*, long) and cuda.cu
    defines launch(const float*, float*, int): on a GPU the link passes and the import fails
    ("undefined symbol"); here the verdict says so at the build."""
    mismatched = LEAN_LIGHT.replace("void launch(const float* x, float* y, long n) { relu_kernel",
                                    "void launch(const float* x, float* y, int n) { relu_kernel")
    result = run_pipeline(job(mismatched, fresh_cache), launch_worker)
    assert result.status == Status.COMPILE_ERROR and result.stage == Stage.BUILD, result.summary()
    assert "do not define" in result.error.message
    assert "launch(float const*, float*, long)" in result.error.traceback_tail
    assert "defined: launch(float const*, float*, int)" in result.error.traceback_tail


def test_an_objects_extra_arguments_go_right_after_its_compiler_and_no_other(tmp_path: Path) -> None:
    """How main.cpp gets the precompiled header's folder: first on its include path, nvcc's command untouched."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "probe.h").write_text("inline int probe() { return 1; }\n")
    (tmp_path / "a.cpp").write_text('#include "probe.h"\nint a() { return probe(); }\n')
    (tmp_path / "b.cpp").write_text("int b() { return 2; }\n")
    (tmp_path / "build.ninja").write_text("rule compile\n  command = c++ -c $in -o $out\n"
                                          "build a.o: compile a.cpp\nbuild b.o: compile b.cpp\n")
    ninja = shutil.which("ninja")
    assert ninja is not None
    log, failed = _compile_objects(tmp_path, ninja, ["a.o", "b.o"], extra_args={"a.o": [f"-I{inc}"]})
    assert failed == [] and (tmp_path / "a.o").exists() and (tmp_path / "b.o").exists(), log
    assert f"$ c++ -I{inc} -c a.cpp -o a.o\n" in log and "$ c++ -c b.cpp -o b.o\n" in log
    log, failed = _compile_objects(tmp_path, ninja, ["a.o"])
    assert failed == ["a.o"] and "probe.h" in log


def test_an_object_whose_error_the_verdict_needs_runs_on_after_another_fails(tmp_path: Path) -> None:
    """main.cpp fails in seconds with the precompiled header; nvcc on a source that holds removed
    torch API must still reach its error, which names the replacement. Other objects stop at once."""
    (tmp_path / "bad.cpp").write_text("int broken( {\n")
    (tmp_path / "slow.cpp").write_text("int slow() { return 2; }\n")
    (tmp_path / "build.ninja").write_text("rule compile\n  command = c++ -c $in -o $out\n"
                                          "rule late\n  command = sleep 1.5 && c++ -c $in -o $out && echo late-done\n"
                                          "build bad.o: compile bad.cpp\nbuild slow.o: late slow.cpp\n")
    ninja = shutil.which("ninja")
    assert ninja is not None
    log, failed = _compile_objects(tmp_path, ninja, ["bad.o", "slow.o"])
    assert failed == ["bad.o"] and "stopped at the first failure: slow.o" in log, log
    assert not (tmp_path / "slow.o").exists()
    log, failed = _compile_objects(tmp_path, ninja, ["bad.o", "slow.o"], finish=frozenset({"slow.o"}))
    assert failed == ["bad.o"] and "late-done" in log and "stopped" not in log, log
    assert (tmp_path / "slow.o").exists()
    assert api_drift.has_construct("AT_DISPATCH_FLOATING_TYPES(x.type(), \"k\", [&] {});")
    assert not api_drift.has_construct("AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"k\", [&] {});")


def test_the_header_is_looked_up_by_main_cpps_own_flags_less_the_shim(fresh_cache: Path, tmp_path: Path) -> None:
    """The parent prebuilds the header for a CUDA flag set with the flags torch gives main.cpp here
    (less the shim folder, which torch/extension.h never reads, and the extension's name): a CPU-only
    torch names no toolkit, so this plan failed at once before and compile-only jobs never got one."""
    main = tmp_path / "main.cpp"
    plan = torch_plan(tmp_path, "probe", [main, tmp_path / "cuda.cu"], "sm_90a", find_nvcc(), tmp_path, [], [], [],
                      [], with_cuda=True)
    with_shim = [f for f in plan.words("cflags") if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    (shim,) = _cpu_torch_shim()
    (tmp_path / "pch").mkdir()
    probe = native._inline_plan(tmp_path / "pch", "pch_probe", True, [], [])
    assert plan.words("cxx") == probe.words("cxx")
    assert [f for f in with_shim if f != f"-I{shim}"] == [f for f in probe.words("cflags")
                                                          if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    assert f"-I{cuda_home(find_nvcc())}/include" in " ".join(with_shim).replace("-isystem ", "-I")
    folder, note = _main_pch([], [])
    assert folder is None and "no precompiled header" in note  # an empty cache: g++ reads the header itself


@pytest.mark.slow  # a real header build for the CUDA flag set: about 70-90 s of both cores and 2 GB
def test_main_cpp_reads_the_parents_header_and_fails_with_the_same_error(fresh_cache: Path) -> None:
    before = build_cache.cache_root(), build_cache._builds()
    note = header_prebuild.build(str(fresh_cache), FlagSet(cuda=True))
    assert "extension.h.gch" in note, note
    # this process builds where it did before (a leftover sent a later test's builds to the trusted tree)
    assert (build_cache.cache_root(), build_cache._builds()) == before
    broken = LEAN.replace('functions=["launch"]', 'functions=["launch_relu"]')
    result = run_pipeline(job(broken, fresh_cache), launch_worker)
    assert result.status == Status.COMPILE_ERROR and "g++ failed to compile the cpp_sources" in result.error.message
    assert re.search(r"main\.cpp:\d+:\d+: error: .*launch_relu", result.error.traceback_tail)
    log = next(fresh_cache.glob("**/nvcc-inline/*/build.log")).read_text()
    first = log.splitlines()[0]
    assert first.startswith("precompiled header for main.cpp: ") and "(prebuilt by the parent)" in first, first
    folder = first.split(": ", 1)[1].split("/torch/extension.h.gch")[0]
    assert f"c++ -I{folder} " in log  # g++ was given its folder; nvcc was not
    assert f"nvcc -I{folder}" not in log and log.count(f"-I{folder}") == 1
