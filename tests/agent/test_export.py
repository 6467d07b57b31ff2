"""`agentforge export` (issue 19, item 5): an honest CPU run (the scripted server's coder writes a
real C++ ReLU kernel, the sandboxed evaluator accepts it) is exported as a package; a fresh
process imports it, calls the custom op inside torch.compile'd functions (the graph keeps the op
as one node: fullgraph, and the fake implementation gives its shape) and checks it against the
task's Model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agentforge.evaluator.result import TimingConfig
from typer.testing import CliRunner

from agentforge.agent.run import optimize
from agentforge.cli import app
from agentforge.settings import Settings

FRESH_PROCESS = r'''
import json, sys
import torch
import relu_task_kernel as pkg
from relu_task_kernel import _reference as task

graphs = []
def record(gm, example_inputs):
    graphs.append([str(node.target) for node in gm.graph.nodes])
    return gm.forward

torch.manual_seed(0)
x = torch.randn(1003)  # not the task's size: the fake implementation sizes the output from the input
reference = task.Model(*task.get_init_inputs())
fused = lambda t: pkg.relu_task(t * 2.0) - 1.0
kept = torch.compile(fused, backend=record, fullgraph=True)(x)
traced = torch.compile(fused, backend="aot_eager", fullgraph=True)(x)
expected = reference(x * 2.0) - 1.0
print(json.dumps({
    "kept_ok": torch.allclose(kept, expected, rtol=1e-6, atol=1e-6),
    "traced_ok": torch.allclose(traced, expected, rtol=1e-6, atol=1e-6),
    "eager_ok": torch.equal(pkg.Module()(x), reference(x)),
    "graph": graphs[0],
    "kernel_module": type(pkg._kernel_module()).__module__,
    "registered": hasattr(torch.ops.agentforge, "relu_task"),
}))
'''


@pytest.fixture(scope="module")
def honest_run(tmp_path_factory, scripted, kernels) -> tuple[Path, str]:
    """One round on the CPU backend: the scripted coder's real kernel, the real evaluator."""
    root = tmp_path_factory.mktemp("export")
    task = root / "relu_task.py"
    task.write_text(kernels.TASK)
    settings = Settings(runs_dir=str(root / "runs"), cache_dir=str(root / "cache"))
    settings.provider.name, settings.provider.base_url, settings.provider.model = "openai", "", "local"
    settings.eval.backend, settings.eval.profile = "cpu", False
    settings.sandbox.isolation = "none"  # the loop's own tests run so too; isolation is tested in tests/sandbox
    settings.agent.max_rounds = 1
    with scripted.ScriptedServer([scripted.Reply(kernels.fenced(kernels.FAST))]) as server:
        settings.provider.base_url = server.openai_base_url
        summary = optimize(str(task), settings, baselines=("eager",),
                           timing=TimingConfig(max_reps=20, time_cap_s=0.5))
    assert summary.best is not None, summary.history
    return root, summary.run_id


def test_export_then_a_fresh_process_runs_the_op_inside_torch_compile(honest_run, tmp_path):
    root, run_id = honest_run
    out = CliRunner().invoke(app, ["export", run_id, "--runs", str(root / "runs"), "--to", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "agentforge::relu_task" in out.output and "torch.compile" in out.output
    package = tmp_path / "relu_task_kernel"
    assert (package / "_kernel.py").read_text() == (root / "runs" / run_id / "best_kernel.py").read_text()
    provenance = json.loads((package / "EXPORT.json").read_text())
    assert provenance["run_id"] == run_id and provenance["speedup_vs_eager"] > 0
    assert len([line for line in (package / "example.py").read_text().splitlines() if line.strip()]) <= 10

    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["kept_ok"] and seen["traced_ok"] and seen["eager_ok"], seen
    assert "agentforge.relu_task.default" in seen["graph"]  # one node of the graph, not a break
    assert seen["kernel_module"] == "relu_task_kernel._kernel" and seen["registered"]


def test_export_by_folder_with_a_name_and_refusals(honest_run, tmp_path, kernels):
    root, run_id = honest_run
    out = CliRunner().invoke(app, ["export", str(root / "runs" / run_id), "--to", str(tmp_path),
                                   "--name", "my_relu"])
    assert out.exit_code == 0, out.output
    assert "import my_relu" in (tmp_path / "my_relu" / "example.py").read_text()

    missing = CliRunner().invoke(app, ["export", "no-such-run", "--runs", str(root / "runs")])
    assert missing.exit_code == 2

    settings = Settings(runs_dir=str(tmp_path / "runs"))
    settings.eval.backend = "cpu"
    settings.agent.max_rounds = 1
    task = tmp_path / "relu_task.py"
    task.write_text(kernels.TASK)
    empty = optimize(str(task), settings, provider=kernels.FakeProvider(["only prose"]),
                     evaluate=kernels.fake_evaluate)
    refused = CliRunner().invoke(app, ["export", empty.run_id, "--runs", str(tmp_path / "runs")])
    assert refused.exit_code == 2
    assert "no correct kernel" in refused.output + (refused.stderr if refused.stderr_bytes else "")
