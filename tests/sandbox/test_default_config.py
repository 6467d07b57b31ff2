"""One set of sandbox defaults: `SandboxConfig()` (a library caller, the RL service) and the CLI's
`Settings` get the same ones, a warm spare and the header prebuild on included."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from agentforge.sandbox import spares
from agentforge.sandbox.config import SandboxConfig, from_settings
from agentforge.sandbox.process_backend import ProcessBackend
from sandbox_helpers import HERE, make_job

from agentforge.settings import SandboxSettings, SettingsError, load_settings


@pytest.mark.user_defaults
def test_the_cli_and_a_library_caller_get_the_same_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no agentforge.toml
    settings = load_settings(env={})
    built = from_settings(settings.sandbox, settings.cache_dir)
    assert built == SandboxConfig(cache_dir=built.cache_dir)
    shared = {f.name for f in dataclasses.fields(SandboxSettings)} & {f.name for f in dataclasses.fields(SandboxConfig)}
    assert {"timeout_s", "warm_spares", "prebuild_headers", "memory_gb", "disk_gb", "isolation"} <= shared
    for name in shared:
        assert getattr(settings.sandbox, name) == getattr(SandboxConfig(), name), name
    assert SandboxConfig().warm_spares >= 1 and SandboxConfig().prebuild_headers


def test_a_bad_sandbox_value_is_refused_once_at_configuration() -> None:
    with pytest.raises(SettingsError, match="AGENTFORGE_SANDBOX_WARM_SPARES"):
        load_settings(env={"AGENTFORGE_SANDBOX_WARM_SPARES": "-1"}, file=None)  # no such file: defaults


def test_a_config_built_with_defaults_keeps_a_spare_after_a_cpu_job(tmp_path: Path) -> None:
    config = SandboxConfig(entry="fake_entries:exec_candidate", python_paths=(str(HERE),), torch_switches=False,
                           timeout_s=60.0, workdir_root=str(tmp_path / "work"), cache_dir=str(tmp_path / "cache"))
    backend = ProcessBackend(config)
    try:
        result = backend.run(make_job("RESULT_NOTE = 1"))
        assert result.error is None, result.error
        spares.settle()
        assert spares.count(backend._spare_key()) == 1
    finally:
        spares.discard_all()
