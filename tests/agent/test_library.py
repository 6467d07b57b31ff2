"""The offline `library` provider end to end: with no key, `optimize` proposes the shipped
reference kernel and its tunable variants, evaluates each for real, keeps the best and reports;
for a task without a shipped kernel it says how to configure a real provider."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentforge.evaluator.result import TimingConfig
from typer.testing import CliRunner

from agentforge.agent.run import optimize
from agentforge.agent.spec import RunSpec
from agentforge.settings import Settings

KERNEL = '''import ctypes

import torch
from agentforge.evaluator.native import load_cpp

OPT_LEVEL = "-O0"
TUNABLES = {"OPT_LEVEL": ["-O0", "-O2"]}

SOURCE = r"""
extern "C" void relu(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
"""
lib = load_cpp("relu_lib", SOURCE, extra_cflags=[OPT_LEVEL], openmp=False)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.relu(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_long(x.numel()))
        return y
'''


@pytest.mark.slow
def test_library_provider_end_to_end(tmp_path: Path, kernels):
    tasks = tmp_path / "tasks" / "level1"
    tasks.mkdir(parents=True)
    (tasks / "relu_lib.py").write_text(kernels.TASK)
    shipped = tmp_path / "kernels" / "cpu" / "level1" / "relu_lib"
    shipped.mkdir(parents=True)
    (shipped / "kernel.py").write_text(KERNEL)

    settings = Settings(runs_dir=str(tmp_path / "runs"), cache_dir=str(tmp_path / "cache"),
                        tasks_root=str(tmp_path / "tasks"))
    settings.provider.name = "library"
    settings.eval.backend = "cpu"
    settings.eval.profile = False
    settings.sandbox.isolation = "none"
    spec = RunSpec(baselines=("eager",), timing=TimingConfig(max_reps=40, time_cap_s=1.0))
    summary = optimize("level1/relu_lib", settings, spec, kernels_root=tmp_path / "kernels")

    assert summary.provider == "library" and "offline `library` provider" in summary.notice
    assert summary.rounds == 2 and "every one of the provider's 2 proposals" in summary.stop_reason
    assert [r["status"] for r in summary.history] == ["ok", "ok"]
    fastest = max(summary.history, key=lambda r: r["speedup"])
    assert summary.best["round"] == fastest["round"]
    best_source = Path(summary.outputs["best_kernel"]).read_text()
    assert f'OPT_LEVEL = {["-O0", "-O2"][fastest["round"] - 1]!r}' in best_source
    assert summary.usage["cost_usd"] == 0
    assert "## Rounds" in Path(summary.outputs["report"]).read_text()


def test_cli_without_a_key_says_it_uses_the_library_and_how_to_configure(tmp_path, relu_task, monkeypatch):
    from agentforge.cli import app

    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "AGENTFORGE_PROVIDER_NAME", "AGENTFORGE_PROVIDER_API_KEY",
                "AGENTFORGE_PROVIDER_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    (tmp_path / "empty.toml").write_text("")  # no settings file of the developer's (a missing one is an error)
    monkeypatch.setenv("AGENTFORGE_CONFIG", str(tmp_path / "empty.toml"))
    result = CliRunner().invoke(app, ["optimize", str(relu_task), "--backend", "cpu", "--out",
                                      str(tmp_path / "runs")])
    assert result.exit_code == 2
    text = " ".join((result.output + (result.stderr if result.stderr_bytes else "")).split())
    assert "offline `library` provider" in text
    assert "OPENAI_API_KEY" in text and "--base-url" in text

    as_json = CliRunner().invoke(app, ["optimize", str(relu_task), "--backend", "cpu", "--json"])
    assert as_json.exit_code == 2 and "OPENAI_API_KEY" in json.loads(as_json.stdout)["error"]
