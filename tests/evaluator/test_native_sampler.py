"""The judge's native sampler (`evaluator/judge/native_sampler.py`) on real processes, and the rule that reads it.

The sandbox-level proof is in the exploit corpus (`cases/native_loader_walk_blas`,
`cases/native_observer_off_torch_mm`, `cases/observer_blocked_not_dumpable`, `honest/gemm_medium_cpp`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from agentforge.evaluator import integrity
from agentforge.evaluator.judge.native_sampler import NativeSampler, classify

OWN = "/cache/build-uid1/lean-cpp/abc"


@pytest.mark.parametrize(("path", "kind"), [
    (f"{OWN}/kernel.so", "own"),
    ("/venv/site-packages/numpy.libs/libscipy_openblas64_-32a4b2a6.so", "blas"),
    ("/opt/intel/lib/libmkl_avx2.so.2", "blas"),
    ("/venv/site-packages/torch/lib/libtorch_cpu.so", "torch"),
    ("/venv/site-packages/torch/lib/libc10.so", "torch"),
    ("/usr/lib/libpython3.11.so.1.0", "python"),
    ("/venv/site-packages/numpy/_core/_multiarray_umath.cpython-311-x86_64-linux-gnu.so", "python"),
    ("/usr/lib/x86_64-linux-gnu/libc.so.6", "system"),
    ("/usr/lib/x86_64-linux-gnu/libgomp.so.1", "system"),
    ("", "jit"),
])
def test_classify(path: str, kind: str) -> None:
    assert classify(path, ("/cache/build-uid1",)) == kind


CHILD = """
import os, sys, time
import numpy as np
a = np.ones((160, 160), dtype=np.float32)
print("ready", flush=True)
sys.stdin.read(1)
work, end, total = sys.argv[1], time.perf_counter() + float(sys.argv[2]), 0
while time.perf_counter() < end:
    if work == "blas":
        a @ a
    else:
        total += sum(range(200))
sys.stdout.flush()
os._exit(0)  # no interpreter shutdown in the window: numpy's finalisation runs OpenBLAS code
"""


def _child(work: str, seconds: float) -> subprocess.Popen[str]:
    """A child that has imported numpy and waits for a byte, then works `seconds` (BLAS or a Python
    loop), then exits. One BLAS thread, as the sandbox gives a worker (`cpu_threads`): a forked
    copy of this process would start OpenBLAS's pool again, whose idle threads spin in libc."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, work, str(seconds)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _sample(work: str, op: str, key: str | None = None) -> dict:
    child = _child(work, 0.4)
    sampler = NativeSampler.open(child.pid)
    if not sampler.available:
        child.communicate("x")
        pytest.skip(f"perf events unavailable here: {sampler.why}")
    sampler.set_own_roots((OWN,))
    sampler.on_request(op, key)
    child.communicate("x")
    sampler.on_request(None)
    return sampler.finish()


def test_blas_work_is_named_from_outside_the_process() -> None:
    report = _sample("blas", "call")
    assert report["available"] and report["requests"] == {"call": 1}
    call = report["samples"]["call"]
    assert call.get("blas", 0) >= 100, report  # 0.4 s at one sample per 250 us of CPU: about 1,600
    assert call["blas"] > 5 * sum(v for k, v in call.items() if k != "blas"), report
    findings, summary = integrity.native_sampling_findings(report)
    assert [f.rule for f in findings] == ["library_fallback"] and summary["blas_in_calls"] == call["blas"]


def test_python_work_is_not_blas() -> None:
    report = _sample("python", "time", "k")
    timed = report["samples"]["timed"]
    assert timed.get("python", 0) >= 100 and timed.get("blas", 0) == 0, report
    assert report["unreadable"] == 0 and report["map_denied"] == 0


def test_unavailable_sampler_reports_why_and_flags_nothing() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # gone: nothing to open the events on
    sampler = NativeSampler.open(pid)
    sampler.on_request("call")
    report = sampler.finish()
    assert report["available"] is False and "refused" in report["why"]
    assert integrity.native_sampling_findings(report) == ([], {"available": False, "why": report["why"]})


def _report(samples: dict, requests: dict, **extra: int) -> dict:
    return {"available": True, "samples": samples, "requests": requests, **extra}


# Counts measured through the sandbox on this VM (2026-11-26), medium_gemm (512^3) unless said.
REQUESTS = {"call": 11, "timed": 23, "null": 12}
HONEST = _report({"call": {"own": 436, "torch": 86, "python": 58}, "timed": {"own": 926, "torch": 101},
                  "null": {"torch": 56}}, REQUESTS)
TORCH = _report({"call": {"own": 412, "torch": 79}, "timed": {"torch": 286, "python": 50}, "null": {"torch": 50}},
                REQUESTS)
BLAS = _report({"call": {"torch": 85, "blas": 87}, "timed": {"own": 1, "torch": 94, "blas": 182},
                "null": {"torch": 54}}, REQUESTS)
# The torch fallback at 384^3 (1-1.5 ms of torch a call): 3.5 sd, still decided.
TORCH_384 = _report({"timed": {"torch": 142}, "null": {"torch": 40}}, REQUESTS)
# results/kernels/cpu level1/gelu at its smallest shape: its kernel too short to be sampled, the harness's
# torch samples above the nulls' by chance (the largest such excess among the 17 shipped CPU kernels).
SMALL = _report({"timed": {"torch": 18, "python": 24}, "null": {"torch": 6}}, {"timed": 23, "null": 12})
TINY = _report({"call": {"torch": 30, "blas": 2}, "timed": {"own": 6, "torch": 8}, "null": {"torch": 3}},
               {"call": 25, "timed": 23, "null": 12})


@pytest.mark.parametrize(("report", "allowed", "rules"), [
    (HONEST, (), []),  # honest/gemm_medium_cpp
    (SMALL, (), []),
    (TORCH, (), ["torch_fallback"]),  # cases/native_observer_off_torch_mm
    (TORCH, ("torch",), []),
    (TORCH_384, (), ["torch_fallback"]),
    (BLAS, (), ["library_fallback"]),  # cases/native_loader_walk_blas
    (BLAS, ("blas",), []),
    (TINY, (), []),  # too few samples to decide anything
    (_report({}, {}, map_denied=2), (), ["observer_blocked"]),
    (_report({}, {}, unreadable=40), (), ["observer_blocked"]),
])
def test_rule_table(report: dict, allowed: tuple[str, ...], rules: list[str]) -> None:
    findings, _ = integrity.native_sampling_findings(report, allowed=allowed)
    assert sorted(f.rule for f in findings) == rules


def test_own_floor_is_the_tasks() -> None:
    half = _report({"timed": {"own": 30, "torch": 60}, "null": {"torch": 0}}, {"timed": 20, "null": 10})
    assert [f.rule for f in integrity.native_sampling_findings(half, own_floor=0.5)[0]] == ["torch_fallback"]
    assert integrity.native_sampling_findings(half, own_floor=0.25)[0] == []
    assert integrity.native_sampling_findings(half)[1]["coverage_timed"] == pytest.approx(30 / 90, abs=1e-3)


def test_stopped_sampler_reports_why() -> None:
    child = _child("python", 0.05)
    sampler = NativeSampler.open(child.pid)
    sampler.stop("not sampled on a CUDA device")
    sampler.on_request("time", "k")
    child.communicate("x")
    assert sampler.finish() == {"available": False, "why": "not sampled on a CUDA device"}
    assert sampler.self_fd < 0 and not sampler.rings
