"""Run configurations fail early with the setting to change; the CLI is thin and wired."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentforge.rl.config import RLConfigError, config_from_dict, load_config
from typer.testing import CliRunner

from agentforge.cli import app

CONFIGS = Path(__file__).resolve().parents[2] / "rl" / "configs"


@pytest.mark.parametrize("name", ["cpu-smoke.toml", "gpu-lora.toml"])
def test_shipped_configs_load(name):
    config = load_config(CONFIGS / name)
    assert config.grpo["per_device_train_batch_size"] % config.grpo["num_generations"] == 0


def test_unknown_settings_and_shapers_fail_at_configuration():
    with pytest.raises(RLConfigError, match="unknown sections"):
        config_from_dict({"model": {"tiny": True}, "rewards": {}})
    with pytest.raises(RLConfigError, match="unknown settings"):
        config_from_dict({"model": {"tiny": True, "size": 3}})
    with pytest.raises(RLConfigError, match="choose one of bonus_speedup, log_speedup, milestones"):
        config_from_dict({"model": {"tiny": True}, "reward": {"shaper": "speed"}})
    with pytest.raises(RLConfigError, match="name_or_path"):
        config_from_dict({})


def test_cli_lists_rl_commands_and_rejects_bad_configs(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["rl", "--help"])
    assert result.exit_code == 0
    for command in ("train", "sft", "data"):
        assert command in result.output
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\ntiny = true\n[reward]\nshaper = "fastest"\n')
    result = runner.invoke(app, ["rl", "train", "--config", str(bad)])
    assert result.exit_code == 2
