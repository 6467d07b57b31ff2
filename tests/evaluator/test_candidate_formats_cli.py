"""Every candidate format the README advertises, end to end through the real CLI: `agentforge eval
... --json` in a subprocess, the process sandbox, real g++ / nvcc / Triton interpreter, an empty
build cache of the test's own. No part is faked.

* KernelBench `load_inline` with C++ sources: built by torch's JIT build, checked and timed on the
  CPU backend (accepted, with timing).
* `load_cpp` (the lean C++ path): the same.
* `load_cuda` (the lean CUDA path) and KernelBench `load_inline` with CUDA sources: without a GPU,
  a compile-only verdict for sm_90a with ptxas's resource report, and the kernels executed for
  correctness by the CPU emulation.
* Triton: checked in Triton's interpreter and compiled for sm_90a.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agentforge.evaluator.worker.compile_only import find_nvcc

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
CANDIDATES = HERE / "candidates"
EXPLOITS = HERE.parent / "exploits"

needs_nvcc = pytest.mark.skipif(find_nvcc() is None, reason="nvcc is not installed")


def agentforge_eval(cache: Path, task: str, candidate: Path, *options: str) -> tuple[int, dict[str, Any]]:
    env = {**os.environ, "AGENTFORGE_CACHE_DIR": str(cache)}
    done = subprocess.run([sys.executable, "-m", "agentforge", "eval", task, str(candidate), "--json", *options],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert done.stdout.strip(), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


def assert_accepted_and_timed(result: dict[str, Any], path: str) -> None:
    assert result["status"] == "ok", (result["stage"], result["error"])
    assert result["accepted"] is True
    assert result["compile"]["ok"] and result["compile"]["path"] == path
    assert result["correctness"] and all(check["passed"] for check in result["correctness"])
    assert result["timing"]["candidate"]["median_us"] > 0 and result["candidate_us"] > 0
    assert result["eager_us"] > 0 and result["speedup"] is not None


def test_a_kernelbench_load_inline_cpp_candidate_is_built_accepted_and_timed(tmp_path: Path) -> None:
    """The format every LLM prompted KernelBench-style writes (issue 13: it was rejected). Left
    unmarked, though a cold torch build takes 20-30 s: the main path must never go untested."""
    code, result = agentforge_eval(tmp_path / "cache", "level1/relu", CANDIDATES / "relu_load_inline_cpp.py",
                                   "--backend", "cpu", "--shape", "small", "--no-compile-baseline")
    assert code == 0
    assert_accepted_and_timed(result, "load_inline")
    assert not result["compile"]["cached"] and result["compile"]["seconds"] > 0


@pytest.mark.slow  # fast paths in tests/kernels/test_verdicts.py; here the CLI's cost (sandbox, timing)
def test_a_lean_load_cpp_candidate_is_built_accepted_and_timed(tmp_path: Path) -> None:
    code, result = agentforge_eval(tmp_path / "cache", str(EXPLOITS / "tasks" / "elementwise_relu.py"),
                                   EXPLOITS / "honest" / "relu_cpp.py", "--backend", "cpu", "--no-compile-baseline")
    assert code == 0
    assert_accepted_and_timed(result, "lean-cpp")


@pytest.mark.slow  # without the CLI: tests/evaluator/test_compile_only.py
@needs_nvcc
def test_a_lean_load_cuda_candidate_is_judged_by_nvcc_and_run_in_the_emulation(tmp_path: Path) -> None:
    code, result = agentforge_eval(tmp_path / "cache", "level1/relu", CANDIDATES / "relu_load_cuda.py",
                                   "--backend", "cuda", "--shape", "small")
    assert code == 0
    assert result["status"] == "ok" and result["stage"] == "done", (result["stage"], result["error"])
    assert result["compile"]["path"] == "compile-only-nvcc" and result["compile"]["arch"] == "sm_90a"
    assert [r["name"] for r in result["compile"]["resources"]] == ["relu"]
    # no GPU here: the kernel executed for correctness by the CPU emulation (issue 14), untimed
    assert result["executed_on"] == "cpu-emulation", result.get("execution_note")
    assert result["correctness"] and all(c["passed"] for c in result["correctness"])
    assert result["accepted"] is True and result["speedup"] is None


@pytest.mark.slow
@needs_nvcc
def test_a_kernelbench_load_inline_cuda_candidate_gets_a_compile_only_verdict(tmp_path: Path) -> None:
    """torch's own build up to the link: cuda.cu (torch/extension.h) by nvcc, main.cpp by g++; then,
    with no GPU here, the kernel executed for correctness by the CPU emulation (issue 14), untimed."""
    code, result = agentforge_eval(tmp_path / "cache", str(EXPLOITS / "tasks" / "elementwise_relu.py"),
                                   EXPLOITS / "gpu" / "relu_cuda_honest.py", "--backend", "cuda")
    assert code == 0
    assert result["status"] == "ok" and result["stage"] == "done", (result["stage"], result["error"])
    assert result["compile"]["path"] == "compile-only-nvcc" and result["compile"]["arch"] == "sm_90a"
    assert any("relu_kernel" in r["name"] for r in result["compile"]["resources"])
    assert result["executed_on"] == "cpu-emulation", result.get("execution_note")
    assert result["correctness"] and all(c["passed"] for c in result["correctness"])
    assert result["accepted"] is True and result["speedup"] is None  # correct, but no timing exists without a GPU


@pytest.mark.slow
def test_a_triton_candidate_is_checked_in_the_interpreter_and_compiled(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    code, result = agentforge_eval(tmp_path / "cache", str(EXPLOITS / "tasks" / "elementwise_relu.py"),
                                   CANDIDATES / "relu_triton.py", "--backend", "triton", "--no-compile-baseline")
    assert code == 0
    assert result["status"] == "ok" and result["accepted"] is True, result["error"]
    assert result["compile"]["path"] == "triton-interpreter" and result["compile"]["arch"] == "sm_90a"
    assert {r["name"] for r in result["compile"]["resources"]} == {"_relu"}
    # the declared shapes, then the hidden ones the evaluation drew (issue 22), all run in the interpreter
    shapes = {c["shape"] for c in result["correctness"]}
    assert {s for s in shapes if not s.startswith("hidden-")} == {"default", "odd"}
    assert all(c["passed"] for c in result["correctness"])
