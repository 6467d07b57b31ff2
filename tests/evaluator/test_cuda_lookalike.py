"""Compile-only CUDA verdicts that reach every build: ModelNew constructed and driven under the CUDA
lookalike (`evaluator/worker/cuda_lookalike.py`), with the real nvcc, g++, sandbox worker and CLI.

Published KernelBench answers build their extensions in `__init__` behind
`torch.cuda.is_available()` or on the first `forward` behind `x.is_cuda`, and many catch a failed
build and fall back to PyTorch. On a machine without a GPU these builds are made all the same, a
failed one is the verdict whatever the candidate did with it, and a CUDA candidate that compiled no
CUDA code says so instead of `ok`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from agentforge.evaluator import build_cache
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import EvalJob, Stage, Status
from agentforge.evaluator.worker import api_drift, cuda_lookalike
from agentforge.evaluator.worker.compile_only import cuda_home, find_nvcc
from agentforge.sandbox.worker import launch_worker

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
EXPLOITS = HERE.parent / "exploits"
IN_INIT = HERE / "candidates" / "relu_cuda_built_in_init.py"
BROKEN = ("if (i < n) y[i] = x[i]", "if (i < n) y[i] = undeclared_name + x[i]")

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")

KERNEL = """
__global__ void k(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = %s;
}
"""


def module(body: str) -> str:
    return ("import torch\nfrom torch import nn\nfrom torch.utils.cpp_extension import load_inline\n"
            f"SRC = {json.dumps(KERNEL % 'x[i] * 2.f')}\nBAD = {json.dumps(KERNEL % 'x[i] * missing_name')}\n"
            + body)


BUILT_IN_FORWARD = module('''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = None

    def forward(self, x):
        if x.is_cuda and self.ext is None:
            self.ext = load_inline("in_forward", cpp_sources="", cuda_sources=SRC, no_implicit_headers=True)
        y = torch.empty(x.shape, device=x.device, dtype=x.dtype)
        if x.is_cuda:
            self.ext.k(x, y)
        return y
''')
TORCH_ONLY = module('''
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
''')
FORBIDDEN_FLAG_CAUGHT = module('''
try:
    _ext = load_inline("fast", cpp_sources="", cuda_sources=SRC, no_implicit_headers=True,
                       extra_cuda_cflags=["--use_fast_math"])
except Exception:
    _ext = None

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
''')
SECOND_BUILD_BROKEN = module('''
_first = load_inline("first", cpp_sources="", cuda_sources=SRC, no_implicit_headers=True)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        try:
            self.second = load_inline("second", cpp_sources="", cuda_sources=BAD, no_implicit_headers=True)
        except RuntimeError:
            self.second = None

    def forward(self, x):
        return _first.k(x)
''')


@pytest.fixture
def fresh_cache(tmp_path: Path) -> Iterator[Path]:
    build_cache.set_cache_root(tmp_path)
    yield tmp_path
    build_cache.set_cache_root(None)


def job(candidate: str, cache: Path) -> EvalJob:
    task = EXPLOITS / "tasks" / "elementwise_relu.py"
    return EvalJob(task_name="elementwise_relu", task_source=task.read_text(), candidate_source=candidate,
                   backend="cuda", device="cpu", cuda_arch="sm_90a", cache_dir=str(cache))


# ----- the lookalike itself (in this process, no build) ------------------------------------------
def test_the_lookalike_looks_like_one_cuda_device_and_holds_no_memory() -> None:
    seen: dict[str, Any] = {}

    class Probe(torch.nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            seen["available"] = torch.cuda.is_available()
            seen["sms"] = torch.cuda.get_device_properties(0).multi_processor_count
            self.conv = torch.nn.Conv2d(3, channels, 3).cuda()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen["x"] = (x.is_cuda, str(x.device))
            y = self.conv(x)
            seen["y"] = (str(y.device), tuple(y.shape), str(torch.empty(3, device="cuda").device),
                         str(torch.ones(2).to("cuda").device))
            torch.cuda.synchronize()
            return y

    huge = [4096, 3, 1024, 1024]  # 48 GiB of float32 if it were allocated
    progress = cuda_lookalike.drive(Probe, [8], [{"__empty__": [huge, "float32"]}], "sm_90a")
    assert progress == {"reached": "forward", "stopped": ""}
    assert seen == {"available": True, "sms": 132, "x": (True, "cuda:0"),
                    "y": ("cuda:0", (4096, 8, 1022, 1022), "cuda:0", "cuda:0")}
    assert not torch.cuda.is_available() and torch.Tensor.to is torch._C.TensorBase.to  # all undone


def test_api_drift_is_named_with_its_replacement() -> None:
    log = ("cuda.cu(12): error: no suitable conversion function from \"at::DeprecatedTypeProperties\" to "
           "\"c10::ScalarType\" exists\n")
    source = 'AT_DISPATCH_FLOATING_TYPES(input.type(), "relu", ([&] { relu<scalar_t><<<1, 1>>>(); }));'
    (note,) = api_drift.explain(log, source)
    assert note.startswith("API drift:") and "x.scalar_type()" in note
    assert api_drift.explain(log, source.replace(".type()", ".scalar_type()")) == []
    assert api_drift.first_error("$ nvcc ...\n/x/.staging-ab12/cuda.cu(12): error: boom\nmore\n") \
        == "cuda.cu(12): error: boom"


# ----- through the judge and the worker, real nvcc ----------------------------------------------
@needs_nvcc
def test_a_build_in_forward_behind_is_cuda_is_reached(fresh_cache: Path) -> None:
    result = run_pipeline(job(BUILT_IN_FORWARD, fresh_cache), launch_worker)
    assert result.status == Status.OK and result.stage == Stage.BUILD, result.summary()
    assert result.compiled and result.compile.path == "compile-only-nvcc"
    assert result.compile.resources and result.compile.resources[0].registers
    assert "up to forward" in result.compile.log_tail and "in_forward.k" in result.compile.log_tail
    assert not result.accepted


@needs_nvcc
def test_a_cuda_candidate_that_builds_no_cuda_says_so(fresh_cache: Path) -> None:
    result = run_pipeline(job(TORCH_ONLY, fresh_cache), launch_worker)
    assert result.status == Status.NO_CUDA_BUILD and result.stage == Stage.BUILD, result.summary()
    assert not result.compiled and "compiled no CUDA code" in result.error.message
    assert "up to forward" in result.error.message


@needs_nvcc
def test_a_refused_flag_the_candidate_caught_is_still_the_verdict(fresh_cache: Path) -> None:
    result = run_pipeline(job(FORBIDDEN_FLAG_CAUGHT, fresh_cache), launch_worker)
    assert result.status == Status.COMPILE_ERROR, result.summary()
    assert "forbidden compiler flags ['--use_fast_math']" in result.error.message


@needs_nvcc
def test_every_build_is_made_and_a_later_broken_one_is_the_verdict(fresh_cache: Path) -> None:
    result = run_pipeline(job(SECOND_BUILD_BROKEN, fresh_cache), launch_worker)
    assert result.status == Status.COMPILE_ERROR and result.stage == Stage.BUILD, result.summary()
    assert "nvcc failed to compile second" in result.error.message
    assert 'identifier "missing_name" is undefined' in result.error.message  # the first error, in the message
    assert "(build 2 of 2)" in result.error.message


# ----- the user's path: the real CLI, the process sandbox ---------------------------------------
def agentforge_eval(cache: Path, candidate: Path) -> dict[str, Any]:
    env = {**os.environ, "AGENTFORGE_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-m", "agentforge", "eval", "level1/relu", str(candidate), "--json",
                           "--backend", "cuda", "--shape", "small"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=1200)
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout)


@needs_nvcc
def test_cli_a_build_in_init_is_compiled_and_a_broken_one_is_a_compile_error_though_caught(tmp_path: Path) -> None:
    """Unmarked: the main compile-only path must never go untested (about 30 s on two cores)."""
    ok = agentforge_eval(tmp_path / "cache", IN_INIT)
    assert ok["status"] == "ok" and ok["stage"] == "build", ok["error"]
    assert ok["compile"]["ok"] and ok["compile"]["path"] == "compile-only-nvcc" and not ok["compile"]["cached"]
    assert any("relu_kernel" in r["name"] for r in ok["compile"]["resources"])
    assert "up to forward" in ok["compile"]["log_tail"] and ok["accepted"] is False

    broken = tmp_path / "broken.py"
    broken.write_text(IN_INIT.read_text().replace(*BROKEN))
    failed = agentforge_eval(tmp_path / "cache", broken)
    assert failed["status"] == "compile_error" and failed["stage"] == "build"
    assert failed["compile"]["ok"] is False
    assert re.search(r'cuda\.cu\(\d+\): error: identifier "undeclared_name" is undefined', failed["error"]["message"])


# ----- judged as torch's own build -----------------------------------------------------------------
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
OURS_ONLY = {"-Xptxas", "-v", "--keep", "--keep-dir"}


def compile_flags(output: str, source: str) -> list[str]:
    """The flags of the command that compiled `source` (cuda.cu by nvcc, main.cpp by c++), less
    paths, the arch and the report flags only the compile-only build adds."""
    line = next(x for x in output.splitlines() if f"{source} " in x and " -c " in x)
    words = shlex.split(line[line.index("]") + 1:] if line.startswith("[") else line.removeprefix("$ "))
    flags, skip = [], False
    for word in words[1:]:
        if skip:
            skip = False
            continue
        if word in ("-isystem", "-o", "--keep-dir", "-c", "-MD", "-MMD", "-MF"):
            skip = word != "-c"
            continue
        if word.startswith(("-I", "-gencode", "/")) or word.endswith((".cu", ".cpp", ".o", ".d")) or word in OURS_ONLY:
            continue
        flags.append(word)
    return flags


@needs_nvcc
def test_the_compile_flags_are_those_of_torchs_own_build(fresh_cache: Path, tmp_path: Path) -> None:
    call = {"name": "flags_probe", "cpp_sources": "", "cuda_sources": KERNEL % "x[i]", "no_implicit_headers": True,
            "extra_cuda_cflags": ["-O3", "--expt-relaxed-constexpr"]}
    source = module(f"_e = load_inline(**{call!r})\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, x):\n        return _e.k(x)\n")
    result = run_pipeline(job(source, fresh_cache), launch_worker)
    assert result.status == Status.OK, result.summary()
    (tmp_path / "torch").mkdir()
    own = subprocess.run([sys.executable, "-c", TORCH_OWN_BUILD, cuda_home(find_nvcc()), json.dumps(call),
                          str(tmp_path / "torch")], capture_output=True, text=True, timeout=600)
    theirs = compile_flags(own.stdout + own.stderr, "cuda.cu")
    assert "-D__CUDA_NO_HALF_OPERATORS__" in theirs and "-std=c++20" in theirs
    assert compile_flags(result.compile.log_tail, "cuda.cu") == theirs
    glue = compile_flags(own.stdout + own.stderr, "main.cpp")
    assert "-std=c++20" in glue and compile_flags(result.compile.log_tail, "main.cpp") == glue


# ----- a complete answer, torch headers and all ----------------------------------------------------
DRIFTED_ANSWER = '''
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* x, scalar_t* y, scalar_t s, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}

torch::Tensor scale(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    AT_DISPATCH_FLOATING_TYPES(x.type(), "scale", ([&] {
        scale_kernel<scalar_t><<<(n + 255) / 256, 256>>>(x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
                                                         (scalar_t)s, n);
    }));
    return y;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = None
        if torch.cuda.is_available():
            try:
                self.ext = load_inline("scale_ext", cpp_sources="torch::Tensor scale(torch::Tensor x, double s);",
                                       cuda_sources=CUDA_SOURCE, functions=["scale"])
            except Exception:
                pass

    def forward(self, x):
        if self.ext is not None and x.is_cuda:
            return torch.relu(self.ext.scale(x, 1.0))
        return torch.relu(x)
'''


@pytest.mark.slow
@needs_nvcc
def test_an_answer_written_for_older_torch_is_told_the_replacement(fresh_cache: Path) -> None:
    """A KernelBench answer (torch's implicit headers, the generated bindings, a build in __init__
    behind is_available() that falls back to PyTorch) whose dispatch passes `x.type()`: current
    torch's headers refuse it, and the verdict says what to write instead (1-3 minutes of nvcc and
    g++ on two cores). Its cuda.cu reads torch/types.h, not torch/extension.h, which would add
    pybind11 and Python's headers to nvcc's passes (106 s instead of 45 s here, quiet) and
    nothing to what is tested: test_candidate_formats_cli builds an answer of that form."""
    result = run_pipeline(job(DRIFTED_ANSWER, fresh_cache), launch_worker)
    assert result.status == Status.COMPILE_ERROR and result.stage == Stage.BUILD, result.summary()
    assert "nvcc failed to compile scale_ext" in result.error.message
    assert "API drift" in result.error.message and "x.scalar_type()" in result.error.message
    fixed = run_pipeline(job(DRIFTED_ANSWER.replace("x.type()", "x.scalar_type()"), fresh_cache), launch_worker)
    assert fixed.status == Status.OK and fixed.compiled, fixed.summary()
    assert any("scale_kernel" in r.name for r in fixed.compile.resources)
    assert "scale_ext.scale" in fixed.compile.log_tail  # forward reached the launch
