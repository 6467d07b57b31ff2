"""The audit flags planted degenerate tasks and passes honest ones."""

from __future__ import annotations

import pytest

from agentforge.audit import audit_paths, audit_task
from agentforge.task import load_task

TEMPLATE = '''
import torch
import torch.nn as nn

SHAPES = {{"small": {{"N": 16}}}}
N = 4096

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x, y):
        return {body}

def get_inputs():
    return [torch.randn(8, N), torch.randn(8, N)]

def get_init_inputs():
    return [N]
'''


def _audit(write_task, body: str, **kwargs):
    return audit_task(load_task(write_task(TEMPLATE.format(body=body))), **kwargs)


def _checks(report) -> set[str]:
    return {f.check for f in report.findings}


def test_honest_task_passes_on_its_small_variant(write_task):
    report = _audit(write_task, "x * self.w + y")
    assert report.ok and report.shape == "small" and report.status == "ok"


@pytest.mark.parametrize(
    ("body", "flag"),
    [
        ("torch.ones(8, x.shape[1]) * 3.0", "constant"),
        ("x * self.w", "ignores-input"),
        ("x + y", "ignores-param"),
        ("(x * self.w + y) * 1e-7", "tiny"),
        ("torch.log(x) * self.w + y", "nonfinite"),
        ("torch.zeros(8, x.shape[1])", "tiny"),
        ("x + 1e-9 * (y + self.w)", "identity"),
    ],
)
def test_planted_degenerate_tasks_are_flagged(write_task, body, flag):
    report = _audit(write_task, body)
    assert flag in _checks(report), report
    assert report.status == "flagged" and not report.ok


def test_the_finding_names_which_input_or_parameter_is_ignored(write_task):
    details = [f.detail for f in _audit(write_task, "y + self.w").findings]
    assert details == ["output does not move when input 0 changes"]
    details = [f.detail for f in _audit(write_task, "x * y").findings]
    assert details == ["output does not move when w changes"]


def test_an_input_with_a_negligible_effect_is_flagged(write_task):
    # y enters 1e-9 times as strongly as x: a kernel that skips it stays within tolerance.
    assert "ignores-input" in _checks(_audit(write_task, "x * self.w + 1e-9 * y"))


def test_constant_integer_buffers_and_int_inputs_are_perturbed_too(write_task):
    source = TEMPLATE.format(body="x[:, :4] * self.table[idx].float()").replace(
        "self.w = nn.Parameter(torch.randn(n))",
        "self.register_buffer('table', torch.arange(10))",
    ).replace("def forward(self, x, y)", "def forward(self, x, idx)").replace(
        "torch.randn(8, N)]", "torch.randint(0, 10, (8, 4))]")
    assert audit_task(load_task(write_task(source))).ok


def test_tasks_over_the_size_budget_are_skipped_with_a_note(write_task):
    task = load_task(write_task(TEMPLATE.format(body="x * self.w + y")))
    report = audit_task(task, shape="default", numel_budget=1000)
    assert report.status == "skipped" and "exceed the budget of 1,000" in report.skipped
    assert report.findings == ()


def test_a_reference_that_raises_is_a_finding_not_a_crash(write_task):
    report = _audit(write_task, "x @ y")  # (8, 16) @ (8, 16) does not multiply
    assert _checks(report) == {"runs"}


def test_audit_paths_reports_files_that_do_not_load(write_task):
    good = write_task(TEMPLATE.format(body="x * self.w + y"), "level1/good.py")
    bad = write_task("import torch\nclass Model: pass\n", "level1/bad.py")
    reports = list(audit_paths([bad, good]))
    assert [r.status for r in reports] == ["flagged", "ok"]
    assert reports[0].findings[0].check == "load" and "get_inputs" in reports[0].findings[0].detail


KB_LARGE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super(Model, self).__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.conv(x)) + self.bias

batch_size = 128
in_channels = 64
out_channels = 128
height = width = 128
kernel_size = 3
bias_shape = (out_channels, 1, 1)

def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]

def get_init_inputs():
    return [in_channels, out_channels, kernel_size, bias_shape]
'''


def test_a_large_kernelbench_problem_is_audited_on_a_shrunk_copy(write_task):
    """Sizes are divided until the problem fits; a global derived from a size follows it."""
    task = load_task(write_task(KB_LARGE))
    report = audit_task(task, numel_budget=1 << 20)
    assert report.status == "ok", report
    assert report.shape.startswith("default/") and int(report.shape.split("/")[1]) >= 8
    assert "height" in task.source and "height = width = 128" in task.source


def test_tuple_assigned_sizes_shrink_too(write_task):
    task = load_task(write_task(KB_LARGE.replace("height = width = 128", "height, width = 128, 128")))
    report = audit_task(task, numel_budget=1 << 20)
    assert report.status == "ok", report
    assert task.module.batch_size == 128  # the loaded task itself is untouched


def test_a_problem_that_cannot_shrink_is_skipped(write_task):
    # A size hard-coded in forward does not shrink with the globals: the meta forward fails.
    source = KB_LARGE.replace("return torch.relu(self.conv(x)) + self.bias",
                              "return torch.relu(self.conv(x)) + self.bias + torch.zeros(128, 128, 126, 126)")
    report = audit_task(load_task(write_task(source)), numel_budget=1 << 20)
    assert report.status == "skipped" and "exceed the budget" in report.skipped
