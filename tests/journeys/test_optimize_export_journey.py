"""optimize, then export, then the exported example, as a user types them (issue 30, items 1 and 2):
a single-output task and the demo's own tuple-output task. Off a terminal the run prints a plain,
ended line per model call and round; the export message gives two ways to run the example, and
each runs exactly as printed and checks the op against the task's Model."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from .user import REPO_ROOT, type_command, user_env

OPTIMIZE = ("agentforge optimize {task} --provider library --max-rounds 1 --backend cpu --quick "
            "--no-compile-baseline --out runs")


@pytest.mark.parametrize(("task", "op", "outputs", "to"), [
    ("level2/add_mul_relu", "add_mul_relu", "(1024, 2048)", "my kernels"),
    ("level2/add_rms_norm", "add_rms_norm", "((1024, 2048), (1024, 2048))", None),  # Model returns a tuple
])
def test_optimize_export_and_run_the_example_as_printed(user_dir: Path, task: str, op: str, outputs: str,
                                                        to: str | None) -> None:
    env = user_env(user_dir.parent / "home")
    run = type_command(OPTIMIZE.format(task=task), user_dir, env)
    assert run.returncode == 0, run.explain()
    lines = run.stdout.splitlines()
    # Off a terminal: one plain line per model call started and answered, and per round; no live table.
    assert any(line.endswith("waiting for the model (coder, round 1)") for line in lines), run.explain()
    assert any("the model answered (coder, round 1) after" in line for line in lines), run.explain()
    assert any(re.search(r"round 1 \(initial\) ok, [\d.]+x: new best$", line) for line in lines), run.explain()
    assert "best vs eager" not in run.stdout and "no LLM key" not in run.output, run.explain()
    assert re.search(r"^measured speedup on shape 'cpu': [\d.]+x vs eager", run.stdout, re.M), run.explain()
    run_id = re.search(r"^run id: (\S+) ", run.stdout, re.M)[1]
    report = (user_dir / "runs" / run_id / "report.md").read_text()
    assert re.search(r"flags: \w+(, \w+)*$", report, re.M) and "('" not in report, report[:400]

    exported = type_command(f"agentforge export {run_id} --runs runs", user_dir, env)
    assert exported.returncode == 0, exported.explain()
    said = exported.stdout.splitlines()
    package = user_dir / f"{op}_kernel"
    assert said[0].startswith(f"wrote {package}: the custom op agentforge::{op}, "), exported.explain()
    commands = [line.strip() for line in said if line.startswith("  python")]
    assert commands == [f"python -m {op}_kernel.example", f"python {op}_kernel/example.py"], exported.explain()
    device = json.loads((package / "EXPORT.json").read_text())["device"]
    assert "flags: " in device and not device.startswith(("(", "{", "[")) and "('" not in device, device

    for command in commands:  # each exactly as printed
        example = type_command(command, user_dir, env)
        assert example.returncode == 0, example.explain()
        assert f"agentforge::{op} matches the reference on shape 'cpu': {outputs}" in example.stdout, \
            example.explain()

    if to is None:
        return
    # --to another folder: the module form changes into it first, the file form names it whole.
    exported = type_command(f"agentforge export {run_id} --runs runs --to '{to}'", user_dir, env)
    assert exported.returncode == 0, exported.explain()
    commands = [line.strip() for line in exported.stdout.splitlines() if line.startswith("  ")][:2]
    where = user_dir / to
    assert commands == [f"cd '{where}' && python -m {op}_kernel.example",
                        f"python '{where}/{op}_kernel/example.py'"], exported.explain()
    elsewhere = user_dir.parent / "elsewhere"
    elsewhere.mkdir()
    for command in commands:
        example = type_command(command, elsewhere, env)
        assert example.returncode == 0, example.explain()
        assert f"agentforge::{op} matches the reference on shape 'cpu': {outputs}" in example.stdout


def _scripted_server():
    """The loopback OpenAI-compatible server the loop's tests use (tests/llm/scripted_server.py)."""
    spec = importlib.util.spec_from_file_location("journey_scripted_server", REPO_ROOT / "tests/llm/scripted_server.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_model_that_writes_no_kernel_off_a_terminal(user_dir: Path) -> None:
    """A real model server (scripted) whose reply has no code: each call is a plain line when it
    starts and when it is answered, with its tokens; the run ends with one error line (it said
    `no correct kernel was found` twice), never glued to an unfinished line."""
    scripted = _scripted_server()
    env = user_env(user_dir.parent / "home")
    replies = [scripted.Reply("Only prose, no code.", input_tokens=120, output_tokens=7)] * 2
    with scripted.ScriptedServer(replies) as server:
        run = type_command(f"agentforge optimize level1/relu --provider openai --base-url {server.openai_base_url} "
                           "--model local --max-rounds 1 --backend cpu --no-compile-baseline --out runs", user_dir, env)
    assert run.returncode == 5, run.explain()
    assert run.stdout.endswith("\n") and "error" not in run.stdout, run.explain()
    lines = run.stdout.splitlines()
    assert any(line.endswith("waiting for the model (coder, round 1)") for line in lines), run.explain()
    assert any(re.search(r"the model answered \(coder, round 1\) after \d+ s: 120\+7 tokens, \$0\.0000$", line)
               for line in lines), run.explain()
    assert "no correct kernel was found" not in run.stdout, run.explain()
    errors = run.stderr.strip().splitlines()
    assert errors[-1].startswith("error: no correct kernel was found in 1 rounds"), run.explain()
    assert run.output.count("no correct kernel was found") == 1, run.explain()
