"""`agentforge eval` refusals that need no sandbox, through the real CLI in a subprocess: an
unknown --shape, a missing task, a bad option, a bad setting, a model-hub task. Each is exit 2,
one line on stderr, and with --json exactly one JSON object on stdout; none imports the task file
(the tasks here sleep and print at import, so importing one would show)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "agentforge"]

# Sleeps and prints at import: an eval that imported it in the CLI process would hang for a
# minute or print into stdout.
HOSTILE = '''
import time
import torch
import torch.nn as nn
print("the task printed at import")
time.sleep(60)

N = 1024
SHAPES = {"small": {"N": 8}, "odd": {"N": 999}}

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
'''

# A problem in the manner of KernelBench's level 4: a Hugging Face model fetched at import.
MODEL_HUB = '''
import torch
from transformers import AutoModelForCausalLM, AutoConfig

class Model(torch.nn.Module):
    def __init__(self, model_name, config):
        super().__init__()
        self.model = AutoModelForCausalLM.from_pretrained(model_name, config=config)

    def forward(self, x):
        return self.model(x).logits

model_name = "some-org/some-model"
config = AutoConfig.from_pretrained(model_name)

def get_inputs():
    return [torch.randint(0, config.vocab_size, (2, 8))]

def get_init_inputs():
    return [model_name, config]
'''

CANDIDATE = '''
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0)
'''


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level4").mkdir()
    paths = {"hostile": tmp_path / "level1" / "hostile.py", "hub": tmp_path / "level4" / "1_gpt2_bs1.py",
             "candidate": tmp_path / "candidate.py", "config": tmp_path / "empty.toml"}
    paths["hostile"].write_text(textwrap.dedent(HOSTILE))
    paths["hub"].write_text(textwrap.dedent(MODEL_HUB))
    paths["candidate"].write_text(textwrap.dedent(CANDIDATE))
    paths["config"].write_text("")
    return paths


def run(args: list[str], files: dict[str, Path], **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    environ = {**os.environ, "AGENTFORGE_CONFIG": str(files["config"]), **env}
    started = time.monotonic()
    out = subprocess.run([*CLI, "eval", *args], capture_output=True, text=True, env=environ, timeout=120)
    return out, time.monotonic() - started


def one_object(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert len(lines) == 1, stdout
    return json.loads(lines[0])


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error")]


def test_unknown_shape_is_a_usage_error_decided_without_importing_the_task(files):
    out, seconds = run([str(files["hostile"]), str(files["candidate"]), "--shape", "huge", "--json"], files)
    assert out.returncode == 2, out.stderr
    assert seconds < 30  # the task sleeps 60 s at import: it was never imported
    obj = one_object(out.stdout)
    assert obj["status"] == "refused" and obj["error"]["type"] == "UnknownShape"
    assert obj["shapes"] == ["default", "small", "odd"]
    assert "printed at import" not in out.stdout + out.stderr
    [line] = error_lines(out.stderr)
    assert line == "error: level1/hostile has no shape 'huge'; its shapes: default, small, odd"


def test_unknown_shape_without_json_says_one_line_and_nothing_on_stdout(files):
    out, _ = run([str(files["hostile"]), str(files["candidate"]), "--shape", "small", "--shape", "tiny"], files)
    assert out.returncode == 2
    assert out.stdout == ""
    assert error_lines(out.stderr) == ["error: level1/hostile has no shape 'tiny'; its shapes: default, small, odd"]


def test_missing_task_and_missing_candidate_are_one_json_object_each(files, tmp_path):
    out, _ = run(["level1/no_such_task", str(files["candidate"]), "--json"], files,
                 AGENTFORGE_TASKS_ROOT=str(tmp_path))
    assert out.returncode == 2
    assert one_object(out.stdout)["error"]["type"] == "NoSuchTask"
    out, _ = run([str(files["hostile"]), str(tmp_path / "absent.py"), "--json"], files)
    assert out.returncode == 2
    obj = one_object(out.stdout)
    assert obj["error"]["type"] == "NoCandidate" and "absent.py" in obj["error"]["message"]


def test_click_usage_errors_are_one_json_object_too(files):
    out, _ = run([str(files["hostile"]), "--json"], files)  # CANDIDATE missing
    assert out.returncode == 2
    obj = one_object(out.stdout)
    assert obj["status"] == "refused" and obj["error"]["type"] == "UsageError"
    assert "candidate" in obj["error"]["message"].lower()
    out, _ = run([str(files["hostile"]), str(files["candidate"]), "--json", "--no-such-flag"], files)
    assert out.returncode == 2 and one_object(out.stdout)["error"]["type"] == "UsageError"


def test_a_bad_setting_is_one_json_object(files):
    out, _ = run([str(files["hostile"]), str(files["candidate"]), "--json"], files,
                 AGENTFORGE_SANDBOX_KIND="teleport")
    assert out.returncode == 2
    obj = one_object(out.stdout)
    assert obj["error"]["type"] == "SettingsError" and "sandbox.kind" in obj["error"]["message"]


def test_a_model_hub_task_is_refused_in_one_line_without_touching_the_network(files):
    out, seconds = run([str(files["hub"]), str(files["candidate"]), "--json"], files)
    assert out.returncode == 2
    assert seconds < 30  # importing it would try huggingface.co
    obj = one_object(out.stdout)
    assert obj["error"]["type"] == "ModelHub"
    [line] = error_lines(out.stderr)
    assert "needs a model hub (imports transformers; KernelBench level 4)" in line
