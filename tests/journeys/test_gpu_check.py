"""`make gpu-check OUT=DIR`, typed in the checkout as the README says, on a machine where nvidia-smi
sees a GPU (a stand-in nvidia-smi) but the interpreter's torch is a CPU-only build (a carried .venv):
it must refuse loudly, never print its plan and exit 0 having measured nothing (issue 32)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from .user import REPO_ROOT, quote, type_command, user_env


def test_make_gpu_check_refuses_a_cpu_only_torch_where_nvidia_smi_sees_a_gpu(user_dir: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this torch can use the GPU: gpu-check would measure")
    bin_dir = user_dir / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    env = user_env(user_dir.parent / "home")
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    out = user_dir / "out"
    typed = type_command(f"make gpu-check OUT={quote(out)}", REPO_ROOT, env, timeout=300)
    assert typed.returncode != 0, typed.explain()
    assert "nvidia-smi sees GPU 0: NVIDIA H100" in typed.stderr and "nothing measured" in typed.stderr, typed.explain()
    assert "no CUDA GPU visible" not in typed.stdout, typed.explain()  # the plan is not printed as a pass
    assert not out.exists()
