"""`agentforge kernels list|show|verify` through typer's CliRunner."""

from __future__ import annotations

from typer.testing import CliRunner

from agentforge.cli import app

WIDE = {"COLUMNS": "200"}


def test_list_shows_every_shipped_kernel_with_its_state():
    out = CliRunner().invoke(app, ["kernels", "list"], env=WIDE)
    assert out.exit_code == 0, out.output
    assert "level1/softmax" in out.output and "h100" in out.output and "cpu" in out.output
    assert "not measured" in out.output  # CUDA kernels compiled here, never run


def test_list_filters_by_gpu_and_task():
    out = CliRunner().invoke(app, ["kernels", "list", "--gpu", "cpu", "--task", "rms_norm"], env=WIDE)
    assert out.exit_code == 0, out.output
    assert "level1/rms_norm" in out.output and "h100" not in out.output and "softmax" not in out.output
    missing = CliRunner().invoke(app, ["kernels", "list", "--task", "no_such_task"], env=WIDE)
    assert missing.exit_code == 1


def test_show_prints_source_tunables_and_record():
    out = CliRunner().invoke(app, ["kernels", "show", "level1/rms_norm", "--gpu", "h100"], env=WIDE)
    assert out.exit_code == 0, out.output
    assert "tunables: BLOCK in" in out.output and "rms_norm_rows" in out.output
    assert "not measured" in out.output or "no record" in out.output


def test_verify_measures_a_cpu_kernel_on_this_machine():
    out = CliRunner().invoke(
        app, ["kernels", "verify", "--gpu", "cpu", "--task", "level1/relu", "--device", "cpu", "--baselines", "eager",
              "--quick", "--shapes", "small"],
        env={**WIDE, "AGENTFORGE_SANDBOX_ISOLATION": "none"})
    assert out.exit_code == 0, out.output
    assert "small" in out.output and "accepted" in out.output


def test_verify_rejects_unknown_baselines():
    out = CliRunner().invoke(app, ["kernels", "verify", "--task", "relu", "--baselines", "eager,magic"], env=WIDE)
    assert out.exit_code == 2


def test_verify_checks_a_triton_kernel_in_the_interpreter_without_a_gpu():
    out = CliRunner().invoke(
        app, ["kernels", "verify", "--gpu", "h100", "--task", "level1/transpose_2d", "--device", "cpu",
              "--shapes", "small"],
        env={**WIDE, "AGENTFORGE_SANDBOX_ISOLATION": "none"})
    assert out.exit_code == 0, out.output
    assert "interpreter" in out.output and "correct in the interpreter on small" in out.output
    assert "sm_90a" in out.output
