"""An exported kernel that prepacks its weight in `prepare_weights()` gets it called as the evaluator
called it: once built, and again when `load_weights` puts the user's weights in (else the packed
copy would be the kernel's own initial weights')."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from agentforge.agent.run import optimize
from agentforge.cli import app
from agentforge.settings import Settings

EXPLOITS = Path(__file__).resolve().parents[1] / "exploits"

PROCESS = r'''
import json
import torch
import linear_task_kernel as pkg
from linear_task_kernel import _reference as task

torch.manual_seed(0); reference = task.Model(*task.get_init_inputs())
torch.manual_seed(0); fast = pkg.Module(*task.get_init_inputs())
x = torch.randn(5, task.K)
with torch.no_grad():
    same = torch.allclose(fast(x), reference(x), atol=1e-5)
    other = task.Model(*task.get_init_inputs())  # the user's own weights, loaded
    loaded = torch.allclose(fast.load_weights(other)(x), other(x), atol=1e-5)
print(json.dumps({"same": same, "loaded": loaded}))
'''


def test_an_exported_kernel_prepacks_for_the_weights_it_is_given(tmp_path: Path, kernels) -> None:
    task = tmp_path / "linear_task.py"
    task.write_text((EXPLOITS / "tasks" / "small_linear.py").read_text())
    source = (EXPLOITS / "honest" / "linear_prepacked_cpp.py").read_text()
    source = source.replace("        self.prepare_weights()\n\n", "\n", 1)  # packed in the hook only
    guard = "        if self.packed_for != (w.data_ptr(), w._version):  # the weights changed since: pack again\n"
    assert guard in source
    source = source.replace(guard + "            self.prepare_weights()\n", "")  # and never again in forward
    settings = Settings(runs_dir=str(tmp_path / "runs"))
    settings.eval.backend = "cpu"
    settings.agent.max_rounds = 1
    run = optimize(str(task), settings, provider=kernels.FakeProvider([kernels.fenced("# fake: us=5\n" + source)]),
                   evaluate=kernels.fake_evaluate)
    assert run.best is not None
    out = CliRunner().invoke(app, ["export", run.run_id, "--runs", str(tmp_path / "runs"), "--to", str(tmp_path)])
    assert out.exit_code == 0, out.output
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", PROCESS], capture_output=True, text=True, env=env, timeout=600,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"same": True, "loaded": True}, seen
