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
