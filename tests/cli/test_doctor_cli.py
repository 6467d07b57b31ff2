"""`agentforge doctor`: the real command on this machine, and the rules of its verdicts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from agentforge import doctor

AGENTFORGE = str(Path(sys.executable).parent / "agentforge")


def test_doctor_runs_in_under_30_s_and_without_a_gpu_says_what_runs() -> None:
    started = time.monotonic()
    proc = subprocess.run([AGENTFORGE, "doctor"], capture_output=True, text=True, timeout=60)
    assert time.monotonic() - started < 30
    names = [line.split(":")[0].split(None, 1)[1] for line in proc.stdout.splitlines()
             if line[:5].strip() in ("ok", "warn", "fail", "info")]
    assert names == ["python", "torch", "gpu", "driver", "nvcc", "cuda home", "cupy", "triton", "device nodes", "ncu",
                     "sandbox", "gpu in sandbox", "loopback", "persisting L2"]
    facts = doctor.gather()
    if not facts.gpu:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "no GPU here: what runs is the CPU backend" in proc.stdout
        assert "compile-only" in proc.stdout and "interpreter" in proc.stdout


def test_doctor_json_is_one_object() -> None:
    proc = subprocess.run([AGENTFORGE, "doctor", "--json"], capture_output=True, text=True, timeout=60)
    report = json.loads(proc.stdout)
    assert {c["status"] for c in report["checks"]} <= {"ok", "warn", "fail", "info"}
    assert report["exit_code"] == proc.returncode


def test_a_driver_older_than_torchs_cuda_fails_with_what_to_do() -> None:
    check = doctor.check_driver(doctor.Facts(torch_version="2.11", torch_cuda="13.0", driver_cuda="12.4"))
    assert check.status == "fail" and "CUDA 12.x" in check.fix
    assert doctor.check_driver(doctor.Facts(torch_cuda="12.8", driver_cuda="13.0")).status == "ok"


def test_a_driver_with_a_cpu_only_torch_fails() -> None:
    check = doctor.check_gpu(doctor.Facts(torch_version="2.13.0+cpu", torch_cuda=None, driver_cuda="13.0"))
    assert check.status == "fail" and "CUDA build" in check.fix


def _toolkit(root: Path, headers: bool) -> str:
    (root / "include").mkdir(parents=True)
    if headers:
        (root / "include" / "cuda_runtime_api.h").write_text("/* stand-in */\n")
    return str(root)


def test_cuda_home_without_headers_is_named_with_the_toolkit_to_use(tmp_path: Path, monkeypatch) -> None:
    """torch guesses CUDA_HOME from the folder above `which nvcc`, a wrapper script's folder on
    some machines: the doctor says which toolkit the evaluator's builds use instead."""
    from agentforge.evaluator import native
    from torch.utils import cpp_extension

    good, bare = _toolkit(tmp_path / "cuda-13.0", True), _toolkit(tmp_path / "usr-local", False)
    cuda_torch = doctor.Facts(torch_version="2.14.1", torch_cuda="13.0", gpu=True)
    monkeypatch.setattr(native, "local_cuda_home", lambda: good)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", good)
    assert doctor.check_cuda_home(cuda_torch).status == "ok"
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", bare)
    check = doctor.check_cuda_home(cuda_torch)
    assert check.status == "warn" and bare in check.detail and check.fix == f"export CUDA_HOME={good}"
    monkeypatch.setattr(native, "local_cuda_home", lambda: None)
    assert doctor.check_cuda_home(cuda_torch).status == "fail"
    assert doctor.check_cuda_home(doctor.Facts(torch_version="2.13.0+cpu")).status == "info"


def test_exit_code_fails_only_on_a_failure() -> None:
    assert doctor.exit_code([doctor.Check("a", "warn", ""), doctor.Check("b", "info", "")]) == 0
    assert doctor.exit_code([doctor.Check("a", "ok", ""), doctor.Check("b", "fail", "", "do x")]) == 2


def test_a_check_that_raises_is_one_failed_line(monkeypatch) -> None:
    def broken(_: doctor.Facts) -> doctor.Check:
        raise OSError("boom")

    monkeypatch.setattr(doctor, "CHECKS", (doctor.check_python, broken))
    checks = doctor.run_checks(doctor.Facts())
    assert checks[1].status == "fail" and "boom" in checks[1].detail


def test_the_doctor_module_imports_only_the_standard_library_and_torch() -> None:
    code = ("import sys; import agentforge.doctor as d; d.run_checks(); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('typer', 'rich', 'pydantic', 'sqlalchemy', 'langgraph', 'openai', 'anthropic', 'matplotlib')); "
            "print(bad)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == "[]", proc.stderr[-2000:]


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can stay root under isolation none")
def test_the_doctor_says_when_isolation_none_would_run_candidates_as_root() -> None:
    """On the H200 image the checkout sat under a folder uid 65534 cannot traverse, so an explicit
    `--isolation none` kept every candidate at uid 0; the doctor now says so."""
    root = Path(tempfile.mkdtemp(prefix="doctor-none-", dir="/tmp"))  # not under pytest's 0700 folder
    try:
        root.chmod(0o755)
        (root / "open" / "env").mkdir(parents=True)
        (root / "locked" / "env").mkdir(parents=True)
        (root / "locked").chmod(0o700)
        assert doctor.none_runs_as_root([str(root / "open" / "env")]) is None
        said = doctor.none_runs_as_root([str(root / "open" / "env"), str(root / "locked" / "env")])
        assert said is not None and "as root (uid 0)" in said and f"cannot traverse {root / 'locked'}," in said
    finally:
        shutil.rmtree(root)
