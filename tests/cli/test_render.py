"""A compiler failure shows its first error, not only the tail: with many follow-on errors the
last 1.5 KB the view printed held none of the cause."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from agentforge.evaluator.result import CompileRecord, ErrorRecord, EvalResult, Stage, Status
from rich.console import Console

from agentforge.cli.render import first_error_line, render_result

REPO = Path(__file__).resolve().parents[2]


def _many_errors(n: int) -> str:
    lines = ["$ g++ -O3 -shared kernel.cpp -o kernel.so", "kernel.cpp:2:24: error: 'the_cause' was not declared"]
    for i in range(n):
        lines += [f"kernel.cpp: In function 'int f{i}()':",
                  f"kernel.cpp:{i + 3}:22: error: 'undefined_{i}' was not declared in this scope"]
    return "\n".join(lines)


def test_first_error_is_shown_before_the_tail() -> None:
    log = _many_errors(60)
    result = EvalResult(task_name="t", candidate_hash="h", backend="cpu", status=Status.COMPILE_ERROR,
                        stage=Stage.BUILD, compile=CompileRecord(ok=False, backend="cpu", log_tail=log),
                        error=ErrorRecord(type="BuildError", message="g++ failed to build x (exit 1)",
                                          traceback_tail=log))
    console = Console(record=True, width=200)
    render_result(console, result)
    text = console.export_text()
    assert "first error: kernel.cpp:2:24: error: 'the_cause' was not declared" in text
    assert "undefined_59" in text  # the tail is still there


def test_where_the_kernels_ran_is_shown() -> None:
    note = "kernels executed by the CPU emulation: correctness only; no timing or speedup exists without a GPU"
    result = EvalResult(task_name="t", candidate_hash="h", backend="cuda", status=Status.OK, stage=Stage.DONE,
                        executed_on="cpu-emulation", execution_note=note)
    console = Console(record=True, width=200)
    render_result(console, result)
    assert f"executed on cpu-emulation: {note}" in console.export_text()
    plain = EvalResult(task_name="t", candidate_hash="h", backend="cpu", status=Status.OK, stage=Stage.DONE)
    console = Console(record=True, width=200)
    render_result(console, plain)
    assert "executed on" not in console.export_text()


def test_a_note_that_says_not_executed_is_printed_once() -> None:
    note = "not executed: the CPU emulation could not build: no __global__ kernel"
    result = EvalResult(task_name="t", candidate_hash="h", backend="cuda", status=Status.OK, stage=Stage.DONE,
                        execution_note=note)
    console = Console(record=True, width=200)
    render_result(console, result)
    text = console.export_text()
    assert note in text and "not executed: not executed" not in text
    other = EvalResult(task_name="t", candidate_hash="h", backend="cuda", status=Status.OK, stage=Stage.DONE,
                       execution_note="no GPU here")
    console = Console(record=True, width=200)
    render_result(console, other)
    assert "not executed: no GPU here" in console.export_text()


def test_first_error_line_skips_the_command_and_knows_nvcc() -> None:
    assert first_error_line("$ nvcc -o error.o x.cu\nx.cu(12): error: identifier \"foo\"") == \
        'x.cu(12): error: identifier "foo"'
    assert first_error_line("all good, no terror") is None


CANDIDATE = '''import torch
from agentforge.evaluator.native import load_cpp
lib = load_cpp("many_errors", r"""
int first = this_is_the_first_error;
{body}
""")
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
'''


def test_eval_cli_shows_the_first_compiler_error(tmp_path: Path) -> None:
    body = "\n".join(f"int f{i}() {{ return undefined_{i}; }}" for i in range(25))
    candidate = tmp_path / "bad.py"
    candidate.write_text(CANDIDATE.replace("{body}", body))
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    proc = subprocess.run([sys.executable, "-m", "agentforge", "eval", str(REPO / "tasks" / "level1" / "relu.py"),
                           str(candidate), "--backend", "cpu", "--shape", "small", "--no-timing"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={"PATH": "/usr/local/bin:/usr/bin:/bin", "AGENTFORGE_CACHE_DIR": str(cache),
                               "HOME": str(tmp_path)})
    assert "compile_error" in proc.stdout, proc.stdout + proc.stderr
    assert "first error:" in proc.stdout and "this_is_the_first_error" in proc.stdout
    assert "Traceback" not in proc.stderr
