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
from agentforge.agent.spec import RunSpec
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
    "kernel_module": type(pkg._default.kernel).__module__,
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
        spec = RunSpec(baselines=("eager",), timing=TimingConfig(max_reps=20, time_cap_s=0.5))
        summary = optimize(str(task), settings, spec)
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
    example = (package / "example.py").read_text().split("import relu_task_kernel as exported")[-1]
    assert 0 < len([line for line in example.splitlines() if line.strip()]) <= 10  # the usage, after its imports

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


SCALE_TASK = """
import torch

ROWS, HIDDEN = 64, 48


class Model(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden))

    def forward(self, x):
        return x * self.weight


def get_inputs():
    return [torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]
"""

SCALE_KERNEL = '''# fake: tag=scale us=5
import ctypes

import torch
from agentforge.evaluator.native import load_cpp

lib = load_cpp("scale_rows", r"""
extern "C" void scale(const float* x, const float* w, float* y, long rows, long cols) {
    for (long i = 0; i < rows; ++i)
        for (long j = 0; j < cols; ++j) y[i * cols + j] = x[i * cols + j] * w[j];
}""", openmp=False)


class ModelNew(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden))

    def forward(self, x):
        x, w = x.contiguous(), self.weight.contiguous()
        y = torch.empty_like(x)
        lib.scale(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(w.data_ptr()), ctypes.c_void_p(y.data_ptr()),
                  ctypes.c_long(x.shape[0]), ctypes.c_long(x.shape[1]))
        return y
'''

WEIGHTS_PROCESS = r'''
import json
import torch
import scale_kernel as pkg
from scale_kernel import _reference as task

graphs = []
def record(gm, example_inputs):
    graphs.append([str(node.target) for node in gm.graph.nodes])
    return gm.forward

torch.manual_seed(0); reference = task.Model(*task.get_init_inputs())
torch.manual_seed(0); fast = pkg.Module(*task.get_init_inputs())
x = torch.randn(7, 48)  # other rows than the task's: the fake implementation follows the input
with torch.no_grad():
    same = torch.allclose(torch.compile(fast, backend="aot_eager", fullgraph=True)(x), reference(x))
    other = task.Model(48)  # weights of the user's own: loaded, they are the ones the kernel uses
    assert fast.load_weights(other) is fast
    loaded = torch.allclose(torch.compile(fast, backend=record, fullgraph=True)(x), other(x))
    wide = pkg.Module(96)  # another layer size: its own meta reference sizes the output
    t = torch.randn(3, 96)
    wide_out = torch.compile(lambda u: wide(u) + 0.0, backend="aot_eager", fullgraph=True)(t)
print(json.dumps({"same": same, "loaded": loaded, "graph": graphs[0], "wide": list(wide_out.shape),
                  "wide_ok": torch.allclose(wide_out, t * wide.kernel.weight)}))
'''


def test_a_module_with_weights_passes_them_to_the_op_so_loaded_weights_count(tmp_path, kernels):
    task = tmp_path / "scale.py"
    task.write_text(SCALE_TASK)
    settings = Settings(runs_dir=str(tmp_path / "runs"))
    settings.eval.backend = "cpu"
    settings.agent.max_rounds = 1
    # The loop with a fake evaluation (the real one is above and in test_loop.py): the export is under test.
    run = optimize(str(task), settings, provider=kernels.FakeProvider([kernels.fenced(SCALE_KERNEL)]),
                   evaluate=kernels.fake_evaluate)
    assert run.best is not None
    out = CliRunner().invoke(app, ["export", run.run_id, "--runs", str(tmp_path / "runs"), "--to", str(tmp_path)])
    assert out.exit_code == 0, out.output
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", WEIGHTS_PROCESS], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["same"] and seen["loaded"] and seen["wide_ok"], seen
    assert "agentforge.scale.default" in seen["graph"]
    assert seen["wide"] == [3, 96]


NESTED_TASK = """
import torch

DTYPE = "float32"
ROWS, HIDDEN = 64, 48
SHAPES = {"cpu": {"ROWS": 9, "HIDDEN": 40}}


class Model(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(hidden))

    def forward(self, x, residual):
        total = x + residual
        return total * self.weight, [total, residual]  # a tuple holding a list; one output is an input
"""

NESTED_TASK_INPUTS = """

def get_inputs():
    return [torch.randn(ROWS, HIDDEN), torch.randn(ROWS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]
"""

NESTED_KERNEL = '''# fake: tag=nested us=5
import ctypes

import torch
from agentforge.evaluator.native import load_cpp

lib = load_cpp("add_scale_rows", r"""
extern "C" void add_scale(const float* x, const float* r, const float* w, float* t, float* y, long rows, long cols) {
    for (long i = 0; i < rows; ++i)
        for (long j = 0; j < cols; ++j) {
            t[i * cols + j] = x[i * cols + j] + r[i * cols + j];
            y[i * cols + j] = t[i * cols + j] * w[j];
        }
}""", openmp=False)


class ModelNew(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))

    def forward(self, x, residual):
        x, residual, w = x.contiguous(), residual.contiguous(), self.weight.detach().contiguous()
        total, y = torch.empty_like(x), torch.empty_like(x)
        lib.add_scale(*(ctypes.c_void_p(t.data_ptr()) for t in (x, residual, w, total, y)),
                      ctypes.c_long(x.shape[0]), ctypes.c_long(x.shape[1]))
        return y, [total, residual]
'''

NESTED_PROCESS = r'''
import json
import torch
import nested_kernel as pkg

graphs = []
def record(gm, example_inputs):
    graphs.append([str(node.target) for node in gm.graph.nodes])
    return gm.forward

reference = pkg.reference()
fast = pkg.Module(*pkg.init_inputs()).load_weights(reference)
x, r = pkg.inputs()
with torch.no_grad():
    want = reference(x, r)
    eager = fast(x, r)
    kept = torch.compile(fast, backend=record, fullgraph=True)(x, r)
    traced = torch.compile(lambda a, b: pkg.nested(a, b)[1][0] * 2.0, backend="aot_eager", fullgraph=True)(x, r)
print(json.dumps({
    "types": [type(eager).__name__, type(eager[1]).__name__, type(kept).__name__, type(kept[1]).__name__],
    "eager_ok": all(torch.equal(a, b) for a, b in [(eager[0], want[0]), *zip(eager[1], want[1])]),
    "kept_ok": all(torch.equal(a, b) for a, b in [(kept[0], want[0]), *zip(kept[1], want[1])]),
    "traced_ok": torch.equal(traced, (x + r) * 2.0),
    "not_the_input": eager[1][1] is not r and kept[1][1] is not r,
    "ops": [n for n in graphs[0] if "agentforge" in n],
    "shape": [pkg.SHAPE, list(x.shape)],
    "structure": repr(pkg.OUTPUT),
}))
'''


def test_a_task_returning_a_tuple_with_a_list_exports_its_structure(tmp_path, kernels):
    """A Model returning a tuple (here holding a list, and one of its own inputs) gets the same
    structure back from the exported op, eager and under torch.compile (one node of the graph), and
    the package's inputs and reference are the run's timed shape."""
    task = tmp_path / "nested.py"
    task.write_text(NESTED_TASK + NESTED_TASK_INPUTS)
    settings = Settings(runs_dir=str(tmp_path / "runs"))
    settings.eval.backend = "cpu"
    settings.agent.max_rounds = 1
    run = optimize(str(task), settings, provider=kernels.FakeProvider([kernels.fenced(NESTED_KERNEL)]),
                   evaluate=kernels.fake_evaluate)
    assert run.best is not None
    out = CliRunner().invoke(app, ["export", run.run_id, "--runs", str(tmp_path / "runs"), "--to", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "python -m nested_kernel.example" in out.output
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", NESTED_PROCESS], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["types"] == ["tuple", "list", "tuple", "list"], seen
    assert seen["eager_ok"] and seen["kept_ok"] and seen["traced_ok"] and seen["not_the_input"], seen
    assert seen["ops"] == ["agentforge.nested.default"], seen  # one node, not a graph break
    assert seen["structure"] == "('tensor', ['tensor', 'tensor'])"
    # fake_evaluate times no shape: the package falls back to the task's default sizes
    assert seen["shape"] == ["default", [64, 48]]
