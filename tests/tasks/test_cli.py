"""`agentforge tasks ...` through typer's CliRunner, on the suite and on a fake KernelBench tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentforge.cli import app

runner = CliRunner()
#: A problem file exactly as KernelBench writes them: no metadata, torch.rand inputs.
KB_STYLE = (Path(__file__).parent / "kernelbench_style_problem.txt").read_text()

KB_FUSION = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)

    def forward(self, x):
        return torch.relu(self.conv(x))

batch_size = 2
in_channels = 3
out_channels = 4
height, width = 8, 8
kernel_size = 3

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
'''


# KernelBench's level 4 in miniature: a Hugging Face model fetched at import (never run here).
KB_MODEL_HUB = '''
import torch
from transformers import AutoModelForCausalLM, AutoConfig

class Model(torch.nn.Module):
    def __init__(self, model_name, config):
        super().__init__()
        self.model = AutoModelForCausalLM.from_pretrained(model_name, config=config)

    def forward(self, x):
        return self.model(x).logits

model_name = "gpt2"
config = AutoConfig.from_pretrained(model_name)

def get_inputs():
    return [torch.randint(0, config.vocab_size, (32, 256))]

def get_init_inputs():
    return [model_name, config]
'''


@pytest.fixture
def fake_kernelbench(write_task, tmp_path) -> Path:
    """A KernelBench-like checkout: level1..level4, numbered files, one malformed, one degenerate,
    two model-hub problems."""
    write_task(KB_STYLE, "KernelBench/level1/1_Square_matrix_multiplication_.py")
    relu = KB_STYLE.replace("torch.matmul(A, B)", "torch.relu(A)").replace("forward(self, A, B)", "forward(self, A)")
    write_task(relu.replace("return [A, B]", "return [A]"), "KernelBench/level1/19_ReLU.py")
    write_task("import torch\ndef get_inputs(:\n", "KernelBench/level1/2_Broken_syntax.py")
    write_task(KB_FUSION, "KernelBench/level2/1_Conv2D_ReLU.py")
    write_task(KB_FUSION.replace("class Model", "class Net"), "KernelBench/level3/1_NoModel.py")
    write_task(KB_MODEL_HUB, "KernelBench/level4/1_gpt2_bs32_seq256.py")
    write_task(KB_MODEL_HUB.replace("gpt2", "opt"), "KernelBench/level4/2_opt_bs1_seq2047.py")
    return tmp_path / "KernelBench"


def test_list_on_a_kernelbench_tree_goes_on_past_malformed_files(fake_kernelbench):
    result = runner.invoke(app, ["tasks", "list", "--root", str(fake_kernelbench)], env={"COLUMNS": "200"})
    assert result.exit_code == 1
    out = result.output
    for name in ("level1/1_Square_matrix_multiplication_", "level1/19_ReLU", "level2/1_Conv2D_ReLU"):
        assert name in out
    assert "2_Broken_syntax.py: syntax error at line 2" in out
    assert "1_NoModel.py: defines no `Model`" in out
    assert "7 files, 3 loaded, 2 failed, 2 skipped (model hub)" in out
    hub = [line for line in out.splitlines() if "model hub" in line and "skipped 2" in line]
    assert hub == ["skipped 2 problems of level4: they need a model hub (Hugging Face from_pretrained at import), "
                   "which agentforge does not download from"]
    assert "level4/1_gpt2" not in out
    assert out.index("level1/19_ReLU") > out.index("level1/1_Square")  # natural order


def test_list_of_the_suite_loads_every_task():
    result = runner.invoke(app, ["tasks", "list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "level1/rms_norm" in result.output and "level3/llama_decoder_layer" in result.output
    assert " 0 failed" in result.output


def test_show_prints_source_shapes_and_metrics():
    result = runner.invoke(app, ["tasks", "show", "level1/gemm_bf16"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "def forward" in out and "bfloat16" in out and "compute-bound" in out
    assert "137" in out  # 2 * 4096^3 FLOP = 137 GFLOP on the default shape
    for shape in ("default", "small", "odd"):
        assert shape in out


def test_run_prints_output_shapes_and_a_median_time():
    result = runner.invoke(app, ["tasks", "run", "level2/add_rms_norm", "--shape", "small", "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert "output 0: shape (10, 48) dtype bfloat16" in result.output
    assert "output 1: shape (10, 48)" in result.output
    assert "median" in result.output and "ms over 5 runs" in result.output


def test_run_rejects_unknown_shape_task_and_device():
    assert runner.invoke(app, ["tasks", "run", "level1/relu", "--shape", "huge"]).exit_code == 2
    assert runner.invoke(app, ["tasks", "run", "level1/nope"]).exit_code == 2
    assert runner.invoke(app, ["tasks", "run", "level1/relu", "--device", "tpu"]).exit_code == 2


def test_audit_one_task_passes(tasks_root):
    result = runner.invoke(app, ["tasks", "audit", "--task", "level1/relu"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "1 ok, 0 flagged, 0 skipped" in result.output


def test_audit_on_a_kernelbench_tree_reports_what_it_finds(fake_kernelbench):
    result = runner.invoke(app, ["tasks", "audit", "--root", str(fake_kernelbench)], env={"COLUMNS": "250"})
    assert result.exit_code == 1
    out = result.output
    assert "syntax error" in out and "defines no `Model`" in out
    # KernelBench's known weakness: torch.rand inputs are >= 0, so ReLU is the identity.
    assert "output 0 equals input 0" in out
    assert "2 ok, 3 flagged, 0 skipped" in out
    assert "skipped 2 problems of level4: they need a model hub" in out


def test_a_model_hub_problem_is_refused_in_one_line_by_show_and_run(fake_kernelbench):
    path = str(fake_kernelbench / "level4" / "1_gpt2_bs32_seq256.py")
    for args in (["tasks", "show", path], ["tasks", "run", path]):
        result = runner.invoke(app, args, env={"COLUMNS": "250"})
        assert result.exit_code == 2
        [line] = [x for x in result.output.splitlines() if x.strip()]
        assert line.endswith("needs a model hub (imports transformers; KernelBench level 4), which agentforge "
                             "does not download from")


def test_help_does_not_import_torch():
    code = "import sys; from agentforge.cli import tasks_cmd; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_audit_table_condenses_many_findings_of_one_check():
    from agentforge.audit import Finding
    from agentforge.cli.tasks_cmd import _condensed

    findings = [Finding("ignores-param", f"p{i}") for i in range(5)] + [Finding("tiny", "zeros pass")]
    assert _condensed(findings) == ["ignores-param: p0; p1; p2 (+2 more)", "tiny: zeros pass"]
