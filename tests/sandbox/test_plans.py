"""Isolation plans and limits as data: what the child would be started with, without starting it."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentforge.sandbox import SandboxConfig, isolation
from agentforge.sandbox.process_backend import child_env, limits_for
from sandbox_helpers import make_job


def test_cuda_jobs_get_no_address_space_limit() -> None:
    config = SandboxConfig(memory_gb=8, cpu_seconds=100, file_size_mb=10, max_processes=32)
    cpu, gpu = limits_for(config, make_job("x")), limits_for(config, make_job("x", device="cuda:1"))
    assert cpu.address_space_bytes == 8 * 2**30 and gpu.address_space_bytes is None
    assert (gpu.cpu_seconds, gpu.file_size_bytes, gpu.max_processes) == (100, 10 * 2**20, 32)


def test_bwrap_plan_keeps_gpu_nodes_and_binds_only_work_and_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(isolation, "probe", lambda mode: None)
    monkeypatch.setattr(isolation, "gpu_device_nodes", lambda: ["/dev/nvidia0", "/dev/nvidiactl"])
    work, cache = tmp_path / "job" / "work", tmp_path / "cache"
    work.mkdir(parents=True)
    cache.mkdir()
    plan = isolation.plan("bwrap", str(work), str(cache), ["/usr"], 65534, str(tmp_path / "c"), "python")
    argv = list(plan.prefix)
    assert argv[:3] == ["bwrap", "--ro-bind", "/"]
    assert argv[argv.index("/dev/nvidia0") - 1:][:3] == ["--dev-bind", "/dev/nvidia0", "/dev/nvidia0"]
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert binds == [str(work), str(cache)]
    assert "--unshare-net" in argv and "--unshare-pid" in argv and "--die-with-parent" in argv


def test_unreachable_interpreter_is_masked_and_bound_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(isolation, "probe", lambda mode: None)
    monkeypatch.setattr(isolation, "is_root", lambda: True)
    private = tmp_path / "private"
    (private / "py" / "lib").mkdir(parents=True)
    private.chmod(0o700)
    (tmp_path / "work").mkdir()
    (tmp_path / "cache").mkdir()
    plan = isolation.plan("unshare", str(tmp_path / "work"), str(tmp_path / "cache"), [str(private / "py")],
                          65534, str(tmp_path / "c"), "python")
    kinds = [(op.kind, op.dst) for op in plan.mounts]
    assert ("ro-bind", str(private / "py")) in kinds
    assert kinds[-1] == ("readonly-all", "")
    assert plan.drop_to_uid == 65534


def test_child_env_is_minimal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy")
    env = child_env(SandboxConfig(python_paths=("/a", "/b")), "/w", "/c")
    assert "OPENAI_API_KEY" not in env and "HTTPS_PROXY" not in env
    assert env["HOME"] == "/w" and env["PYTHONPATH"] == "/a:/b"
    assert env["TORCH_EXTENSIONS_DIR"] == "/c/torch_extensions"
