"""Settings reject what would silently disable a limit or be ignored: NaN, infinities, negative
budgets, values of the wrong type in TOML (a list, a bool for a number), a TOML syntax error, and
a settings file named by AGENTFORGE_CONFIG that does not exist. Each message is one line naming
the setting, where the bad value came from and what to set."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentforge.settings import Settings, SettingsError, load_settings


@pytest.mark.parametrize(("var", "value", "expected"), [
    ("AGENTFORGE_SANDBOX_TIMEOUT_S", "nan", "finite"),  # NaN compared false: no time limit at all
    ("AGENTFORGE_SANDBOX_TIMEOUT_S", "inf", "finite"),
    ("AGENTFORGE_SANDBOX_TIMEOUT_S", "0", "greater than 0"),
    ("AGENTFORGE_SANDBOX_MEMORY_GB", "-4", "greater than 0"),
    ("AGENTFORGE_SANDBOX_DISK_GB", "0", "greater than 0"),
    ("AGENTFORGE_AGENT_MAX_MINUTES", "-1", "greater than 0"),
    ("AGENTFORGE_AGENT_MAX_COST_USD", "-0.5", "at least 0"),
    ("AGENTFORGE_AGENT_MAX_ROUNDS", "0", "at least 1"),
    ("AGENTFORGE_AGENT_MAX_ROUNDS", "2.5", "not a whole number"),
    ("AGENTFORGE_SANDBOX_WORKERS", "-2", "at least 1"),
    ("AGENTFORGE_PROVIDER_TEMPERATURE", "nan", "finite"),
    ("AGENTFORGE_SANDBOX_ISOLATION", "nope", "choose one of: auto, bwrap, unshare, none"),
    ("AGENTFORGE_SANDBOX_STAGE_BUDGET", "bild=0.5", "GROUP=FRACTION"),
    ("AGENTFORGE_SANDBOX_STAGE_BUDGET", "build=0.9,timing=0.2", "add up to 1.25, over 1"),
])
def test_bad_environment_value_names_the_variable(var: str, value: str, expected: str) -> None:
    with pytest.raises(SettingsError) as caught:
        load_settings(env={var: value}, file=None)
    message = str(caught.value)
    assert expected in message and var in message and "\n" not in message


@pytest.mark.parametrize(("toml", "expected"), [
    ("[agent]\nmax_rounds = [1, 2]\n", "is [1, 2], not a whole number"),
    ("[agent]\nmax_minutes = -5\n", "must be greater than 0"),
    ("[agent]\nmax_rounds = true\n", "not a whole number"),
    ("[sandbox]\ntimeout_s = nan\n", "finite"),
    ("[sandbox]\nmemory_gb = \"lots\"\n", "not a number"),
    ("results_url = 5\n", "not a string"),
    ("[agnet]\nmax_rounds = 3\n", "unknown setting 'agnet.max_rounds'"),
    ("[agent\nmax_minutes = 5\n", "is not valid TOML"),
    ("[agent]\nmax_minutes = \n", "is not valid TOML"),
])
def test_bad_toml_is_one_line_naming_the_file(tmp_path: Path, toml: str, expected: str) -> None:
    path = tmp_path / "agentforge.toml"
    path.write_text(toml)
    with pytest.raises(SettingsError) as caught:
        load_settings(env={}, file=path)
    message = str(caught.value)
    assert expected in message and str(path) in message and "\n" not in message


def test_good_toml_values_load(tmp_path: Path) -> None:
    path = tmp_path / "agentforge.toml"
    path.write_text("[agent]\nmax_minutes = 5\n[sandbox]\ntimeout_s = 30\ndisk_gb = 0.5\n")
    settings = load_settings(env={}, file=path)
    assert (settings.agent.max_minutes, settings.sandbox.timeout_s, settings.sandbox.disk_gb) == (5.0, 30.0, 0.5)
    assert isinstance(settings.sandbox.timeout_s, float)


def test_config_variable_naming_a_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="AGENTFORGE_CONFIG"):
        load_settings(env={"AGENTFORGE_CONFIG": str(tmp_path / "nonexistent.toml")})
    with pytest.raises(SettingsError, match="--config"):
        load_settings(env={}, file=tmp_path / "nonexistent.toml")


def test_config_variable_naming_a_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "team.toml"
    path.write_text("[agent]\nmax_rounds = 3\n")
    assert load_settings(env={"AGENTFORGE_CONFIG": str(path)}).agent.max_rounds == 3


def test_bad_flag_value_is_rejected() -> None:
    with pytest.raises(SettingsError, match="--max-minutes"):
        load_settings(flags={"agent.max_minutes": float("nan")}, env={})


def test_validate_checks_settings_built_in_code() -> None:
    settings = Settings()
    settings.sandbox.timeout_s = float("nan")
    with pytest.raises(SettingsError, match="AGENTFORGE_SANDBOX_TIMEOUT_S"):
        settings.validate()
    assert Settings().validate() is not None


def test_stage_shares_reach_the_sandbox_config(tmp_path: Path) -> None:
    from agentforge.sandbox.config import from_settings

    settings = load_settings(env={"AGENTFORGE_SANDBOX_STAGE_BUDGET": "build=0.6, timing=0.2"}, file=None)
    assert from_settings(settings.sandbox, str(tmp_path)).stage_shares == (("build", 0.6), ("timing", 0.2))
    assert from_settings(load_settings(env={}, file=None).sandbox, str(tmp_path)).stage_shares == ()
