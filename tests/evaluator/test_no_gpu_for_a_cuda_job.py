"""A CUDA job on a machine without a GPU is the machine's lack, said as such: not a task error
(which would mark the task broken for the RL service and the leaderboard) and not the
candidate's fault. Before, `--device cuda` here blamed the task's `get_inputs()`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from agentforge.evaluator import device_state
from agentforge.evaluator.api import make_job
from agentforge.evaluator.judge.pipeline import run_pipeline
from agentforge.evaluator.result import Stage, Status
from agentforge.sandbox.worker import launch_worker

from agentforge.candidate import Candidate
from agentforge.task import load_task

REPO = Path(__file__).resolve().parents[2]
HONEST = REPO / "tests" / "exploits" / "gpu" / "relu_cuda_honest.py"
AGENTFORGE = str(Path(sys.executable).parent / "agentforge")

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: CUDA jobs run")


def test_cpu_jobs_and_visible_devices_are_not_refused() -> None:
    assert device_state.unavailable_reason(torch.device("cpu")) is None
    if torch.cuda.is_available():
        assert device_state.unavailable_reason(torch.device("cuda", 0)) is None
    beyond = torch.device("cuda", torch.cuda.device_count() if torch.cuda.is_available() else 3)
    assert "asks for cuda:" in (device_state.unavailable_reason(beyond) or "")


@needs_no_gpu
def test_a_cuda_build_beside_the_drivers_node_names_the_confinement(tmp_path: Path, monkeypatch) -> None:
    """On an H200 the sandbox's read-only /proc kept cuInit from starting, and every CUDA job said the
    machine had no GPU. With the driver's control node present, the reason now points at the
    confinement and at the doctor's line that tests it."""
    monkeypatch.setattr(torch.version, "cuda", "13.0")  # as a CUDA build of torch reads (this one is CPU-only)
    (tmp_path / "nvidiactl").touch()
    said = device_state.unavailable_reason(torch.device("cuda", 0), dev=str(tmp_path)) or ""
    assert "confinement may hide the GPU" in said and "gpu in sandbox" in said and "--isolation none" in said
    (tmp_path / "nvidiactl").unlink()
    said = device_state.unavailable_reason(torch.device("cuda", 0), dev=str(tmp_path)) or ""
    assert "no CUDA GPU" in said and "no NVIDIA GPU or driver" in said


@needs_no_gpu
def test_a_cuda_job_without_a_gpu_is_refused_as_the_machines_lack() -> None:
    job = make_job(load_task("level1/relu"), Candidate(HONEST.read_text(), backend="cuda"), device="cuda",
                   shapes=("small",))
    result = run_pipeline(job, launch_worker)
    assert result.status == Status.CRASH and result.stage == Stage.SANDBOX, result.summary()
    assert result.error is not None and result.error.type == "SandboxError"
    assert "no CUDA GPU" in result.error.message and "device cpu or auto" in result.error.message
    assert not result.accepted and result.compile is None  # nothing of the candidate ran


@needs_no_gpu
def test_eval_with_device_cuda_without_a_gpu_exits_2_with_what_to_do() -> None:
    proc = subprocess.run([AGENTFORGE, "eval", "level1/relu", str(HONEST), "--device", "cuda", "--shape", "small"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "task error" not in proc.stderr and "no CUDA GPU" in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


# ----- a CUDA job whose candidate holds no CUDA: told before anything is built ------------------------
CPP_ONLY = REPO / "tests" / "journeys" / "data" / "relu_load_inline.py"
SHIPPED_CUDA = REPO / "results" / "kernels" / "h100" / "level1" / "relu" / "kernel.py"
LEAN_CUDA = REPO / "tests" / "evaluator" / "candidates" / "relu_load_cuda.py"


def test_a_source_without_cuda_is_named_and_cuda_sources_are_not() -> None:
    from agentforge.evaluator.cuda_source import missing_cuda_source

    why = missing_cuda_source(CPP_ONLY.read_text())
    assert why is not None and "--backend cpu" in why and "\n" not in why
    for source in (SHIPPED_CUDA, LEAN_CUDA, REPO / "tests" / "journeys" / "data" / "relu_cuda_guarded_init.py"):
        assert missing_cuda_source(source.read_text()) is None, source


@needs_no_gpu
def test_a_cpp_only_cuda_job_is_no_cuda_build_before_any_build() -> None:
    job = make_job(load_task("level1/relu"), Candidate(CPP_ONLY.read_text(), backend="cuda"), device="cpu",
                   shapes=("small",))
    result = run_pipeline(job, launch_worker)
    assert result.status == Status.NO_CUDA_BUILD and result.stage == Stage.BUILD, result.summary()
    assert result.compile is None and not result.correctness  # nothing was built or run
    assert result.error is not None and "holds no CUDA code" in result.error.message
    assert "build" not in result.provenance.stage_seconds


def test_what_a_cuda_job_runs_without_a_gpu_is_one_line() -> None:
    from agentforge.evaluator.cuda_emulation.judge import MAX_ELEMENTS

    from agentforge.agent.no_gpu import cuda_without_gpu

    job = make_job(load_task("level1/relu"), Candidate("", backend="cuda"), device="cpu")
    figures = {"memory": {"kind": "cpu"}, "shapes": {"small": {"numel": 132}, "default": {"numel": MAX_ELEMENTS * 4}}}
    plan = cuda_without_gpu(job, figures, ("small", "default"))
    assert plan is not None and plan.executed == ("small",) and plan.compiled_only == ("default",)
    assert "compile-only verdict for sm_90a" in plan.note and "CPU emulation on small" in plan.note
    assert "\n" not in plan.note and "default" in plan.note
    none_fit = cuda_without_gpu(job, figures, ("default",))
    assert none_fit is not None and none_fit.executed == () and "a smaller --shape" in none_fit.note
    gpu = {**figures, "memory": {"kind": "cuda"}}
    assert cuda_without_gpu(job, gpu, ("small",)) is None
    assert cuda_without_gpu(make_job(load_task("level1/relu"), Candidate("", backend="cpu")), figures, ()) is None


GUARDED = '''
import torch
from torch import nn
from torch.utils import cpp_extension
from agentforge.evaluator.cuda_emulation import environment

environment.activate("sm_90a")  # what the candidate worker does before an emulated CUDA job's module runs


class ModelNew(nn.Module):  # the guard of many published answers, around their load_inline
    def __init__(self):
        super().__init__()
        self.reached = torch.cuda.is_available() and torch.cuda.device_count() == 1
        self.capability = torch.cuda.get_device_capability()
        self.judged = cpp_extension.load_inline.__module__


model = ModelNew()
x = torch.randn(4, device="cuda")
print(model.reached, model.capability, model.judged, x.is_cuda)
'''


@needs_no_gpu
def test_in_the_emulated_worker_a_guarded_init_sees_a_cuda_device() -> None:
    proc = subprocess.run([sys.executable, "-c", GUARDED], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["True", "(9,", "0)", "agentforge.evaluator.cuda_emulation.environment", "True"], \
        proc.stdout
