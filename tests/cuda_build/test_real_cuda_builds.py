"""The GPU path's builds, for real, on a machine without a GPU: a CUDA build of torch (`make
cuda-venv`, made by `make test` where nvcc is installed) runs torch's own `load_inline` with nvcc
and g++, links against libtorch_cuda and imports the module. A CPU-only torch cannot link these, so
before this tier no test took the path every KernelBench CUDA answer takes on a GPU machine.

Each case runs `cuda_torch_driver.py` under that environment's interpreter (a few builds of about
25-60 s each on two cores)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("cuda_torch_driver.py")
HONEST_ANSWER = REPO / "tests" / "exploits" / "gpu" / "relu_cuda_honest.py"
SANDBOX_UID = 65534

pytestmark = [pytest.mark.cuda_build, pytest.mark.slow]


def _cuda_python() -> tuple[str | None, str]:
    python = os.environ.get("AGENTFORGE_CUDA_PYTHON") or str(REPO / ".venv-cuda" / "bin" / "python")
    if not Path(python).exists():
        return None, f"no CUDA build of torch at {python}: `make cuda-venv` makes one (nvcc needed too)"
    if shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists():
        return None, "nvcc is not installed"
    probe = subprocess.run([python, "-c", "import torch; print(torch.version.cuda or '')"], capture_output=True,
                           text=True, timeout=120)
    if probe.returncode != 0 or not probe.stdout.strip():
        return None, f"{python}'s torch is not a CUDA build: {(probe.stdout + probe.stderr).strip()[-300:]}"
    return python, ""


@pytest.fixture(scope="module")
def cuda_python() -> str:
    python, why = _cuda_python()
    if python is None:
        pytest.skip(why)
    return python


def drive(python: str, *args: str, env: dict[str, str] | None = None, timeout: float = 900) -> dict[str, Any]:
    proc = subprocess.run([python, str(DRIVER), *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=REPO)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder the sandbox user can reach (pytest's own tmp_path sits under a 0700 folder)."""
    folder = Path(tempfile.mkdtemp(prefix="agentforge-cuda-build-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def test_a_kernelbench_answer_builds_links_and_imports_with_torch_cuda_home_wrong(cuda_python: str,
                                                                                    tmp_path: Path) -> None:
    """KernelBench's shape (torch/extension.h in the CUDA source, a declaration in `cpp_sources`,
    the generated bindings), built by the build stage as on a GPU machine. torch's `CUDA_HOME` is
    a folder with no CUDA headers, as torch guesses it where nvcc on the path is a wrapper script
    (`/usr/local/bin/nvcc`): the build uses nvcc's own toolkit and succeeds. Then the same source
    again in a fresh process: the build cache answers, with no compiler run."""
    no_headers = tmp_path / "no-cuda-headers"
    no_headers.mkdir()
    cache = tmp_path / "cache"
    env = {"CUDA_HOME": str(no_headers)}
    first = drive(cuda_python, "load", str(HONEST_ANSWER), str(cache), env=env)
    assert first["ok"] and first["error"] is None, first["log_tail"]
    assert first["has_model"] and first["path"] == "load_inline" and not first["cached"]
    assert first["torch_cuda_home"] == str(no_headers)  # corrected for the build only, then put back
    assert "nvcc" in first["log_tail"] and "cuda.cuda.o" in first["log_tail"]
    assert [lib for lib in first["libraries"] if "agentforge_exploit_relu" in Path(lib).name], first["libraries"]
    second = drive(cuda_python, "load", str(HONEST_ANSWER), str(cache), env=env)
    assert second["ok"] and second["has_model"] and second["cached"], second
    assert second["seconds"] < first["seconds"] / 2, (first["seconds"], second["seconds"])


BROKEN_ANSWER = '''
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
__global__ void relu_kernel(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : undeclared_name;
}
"""
_ext = load_inline("agentforge_broken_relu", cpp_sources="", cuda_sources=CUDA, no_implicit_headers=True)


class ModelNew(nn.Module):
    def forward(self, x):
        return x
'''


def test_a_build_error_in_the_cuda_source_is_the_verdict(cuda_python: str, tmp_path: Path) -> None:
    """nvcc's error reaches the verdict, its first error line kept. The source reads no torch
    header: the error is what is tested, and nvcc reaches it in seconds instead of after a minute
    or more of torch/extension.h (the answer above builds that form)."""
    broken = tmp_path / "broken.py"
    broken.write_text(BROKEN_ANSWER)
    result = drive(cuda_python, "load", str(broken), str(tmp_path / "cache"))
    assert not result["ok"] and result["error"].startswith("BuildError"), result
    assert "undeclared_name" in result["log_tail"] and "error" in result["log_tail"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the prebuild drops to the sandbox user only when run as root")
def test_gpu_check_prebuild_builds_as_the_sandbox_user_for_its_evaluations(cuda_python: str,
                                                                          shared_tmp: Path) -> None:
    """`make gpu-check` builds the reference kernels in parallel before the serial GPU
    measurements, as uid 65534: the sandboxed evaluations (uid 65534) then find them built."""
    from agentforge.sandbox.isolation import blocking_ancestor

    probe = subprocess.run([cuda_python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                           capture_output=True, text=True, timeout=60)
    blocked = next((b for p in [*probe.stdout.split(), str(REPO)] if (b := blocking_ancestor(p, SANDBOX_UID))), None)
    report = drive(cuda_python, "prebuild", "level1/relu", str(shared_tmp))
    if blocked:  # the prebuild says why it left the builds to the sandbox, and builds nothing
        assert report["kernels"] == 0 and blocked in report["skipped"], report
        pytest.skip(f"{cuda_python}'s interpreter or the project is under {blocked}, closed to uid {SANDBOX_UID}")
    assert report == {**report, "kernels": 1, "failed": {}}, report
    source = shared_tmp / "relu.py"
    from agentforge.kernel_library import find_kernel

    kernel = find_kernel("level1/relu", "cuda", gpu="h100")
    assert kernel is not None
    source.write_text(kernel.source)
    source.chmod(0o644)
    served = drive(cuda_python, "load", str(source), str(shared_tmp / "cache"), "--as-sandbox-user")
    assert served["uid"] == SANDBOX_UID and served["ok"] and served["has_model"], served
    assert served["cached"], served


def test_doctor_under_a_cuda_torch_names_a_cuda_home_without_headers(cuda_python: str, tmp_path: Path) -> None:
    bare = tmp_path / "no-cuda-headers"
    bare.mkdir()
    proc = subprocess.run([cuda_python, "-m", "agentforge.doctor", "--json"], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "CUDA_HOME": str(bare)})
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["torch"]["detail"].endswith("build") and "CUDA" in checks["torch"]["detail"]
    assert checks["cuda home"]["status"] == "warn" and str(bare) in checks["cuda home"]["detail"], checks
    assert checks["cuda home"]["fix"].startswith("export CUDA_HOME=/")
