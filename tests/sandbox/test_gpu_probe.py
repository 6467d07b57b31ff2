"""The `gpu in sandbox` probe: a real child, confined by the judge's own `child.harden` under each
isolation mode, then asking the CUDA driver to start. Here there is no driver, so the answer is
that libcuda does not load; what is checked is that the probe ran confined as a judge is."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from agentforge.sandbox import isolation
from agentforge.sandbox.gpu_probe import GpuProbe, probe
from sandbox_helpers import MODES, fake_config


@pytest.mark.parametrize("mode", MODES)
def test_the_probe_runs_under_the_judges_own_confinement(tmp_path: Path, mode: str) -> None:
    config = fake_config(tmp_path, isolation=mode)
    result = probe(mode, config)
    assert result.mode == mode and result.sandbox.startswith(f"process+{mode}(")
    (tmp_path / "cache").mkdir(exist_ok=True)
    plan = isolation.plan(mode, str(tmp_path), str(tmp_path / "cache"),
                          isolation.child_paths(sys.executable, config.python_paths), config.sandbox_uid,
                          fallback_cache=str(tmp_path / "fallback"), python=sys.executable)
    judge = isolation.judge_uid(plan.drop_to_uid) if plan.drop_to_uid is not None else os.geteuid()
    assert result.uid == judge, result
    assert result.root_readonly is (mode != "none"), result
    if not Path("/dev/nvidiactl").exists():
        assert result.code is None and not result.ok and "libcuda" in result.detail
    else:  # a GPU machine: cuInit answered inside the confinement
        assert isinstance(result.code, int), result
    assert not [p for p in (tmp_path / "work").iterdir() if p.name.startswith("gpu-probe-")]


def test_only_a_started_driver_with_a_device_is_ok() -> None:
    assert GpuProbe("unshare", "", 0, devices=1).ok
    assert not GpuProbe("unshare", "", 304, devices=0, detail="CUDA_ERROR_OPERATING_SYSTEM").ok
    assert not GpuProbe("unshare", "", 0, devices=0).ok
