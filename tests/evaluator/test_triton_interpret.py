"""Triton kernels without a GPU: the interpreter checks them (with its bf16 arithmetic repaired),
then each launched kernel is compiled for sm_90a and ptxas's resources land in the verdict.

Everything that runs the interpreter does so in a fresh process (the sandbox child, or a plain
subprocess): Triton's mode is fixed when it is first imported, and this test process has already
imported it for the GPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from agentforge.evaluator.result import EvalResult, Measure, Status
from agentforge.evaluator.worker import triton_interpret

from agentforge.candidate import Candidate
from agentforge.evaluation import evaluate_many, make_job
from agentforge.task import Task
from tests.fixtures.sandbox import quiet

pytestmark = pytest.mark.skipif(not triton_interpret.available(), reason="triton is not installed")

TASKS = Path(__file__).resolve().parent.parent / "exploits" / "tasks"

HEADER = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 256
TUNABLES = {"BLOCK": [256, 512]}
'''

SOFTMAX_KERNEL = '''
@triton.jit
def _softmax_rows(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    # Any row length: an online max and sum over BLOCK-wide tiles, then a second pass that writes.
    # (Hidden shapes, 2-4x the declared columns, would catch a kernel that read one tile only.)
    row = tl.program_id(0).to(tl.int64)
    m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), 0)
    s = tl.sum(tl.zeros([BLOCK], tl.float32), 0)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(x_ptr + row * cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, 0))
        tile_max = tl.max(x, 0)
        new_m = tl.maximum(m, tile_max)
        s = s * tl.exp(m - new_m) + tl.sum(e, 0) * tl.exp(tile_max - new_m)
        m = new_m
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < cols
        x = tl.load(x_ptr + row * cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(out_ptr + row * cols + offs, (tl.exp(x - m) / s).to(out_ptr.dtype.element_ty), mask=mask)
'''

LAUNCH = '''

class ModelNew(nn.Module):
    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        _softmax_rows[(x.shape[0],)](x, out, x.shape[1], BLOCK=BLOCK, num_warps=4)
        return out
'''

HONEST = HEADER + SOFTMAX_KERNEL + LAUNCH
# The mask drops each row's last element: right on most of the row, wrong as a softmax.
OFF_BY_ONE = HONEST.replace("mask = offs < cols", "mask = offs < cols - 1")
# A helper without @triton.jit runs as plain Python in the interpreter (so anything, PyTorch
# included, could hide there), but no GPU compile accepts it.
INTERPRETER_ONLY = HEADER + """
def _exp_shifted(x):
    return tl.exp(x - tl.max(x, 0))
""" + SOFTMAX_KERNEL.replace("e = tl.exp(x - tl.max(x, 0))", "e = _exp_shifted(x)") + LAUNCH
# The kernel is launched (and compiles), but the answer is PyTorch's.
FALLBACK = HONEST.replace("        return out\n", "        return torch.softmax(x, dim=-1)\n")


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EvalResult]:
    root = tmp_path_factory.mktemp("triton")
    config = quiet(root, timeout_s=300)
    task = Task("row_softmax", (TASKS / "row_softmax.py").read_text())
    sources = {"honest": HONEST, "off_by_one": OFF_BY_ONE, "interpreter_only": INTERPRETER_ONLY,
               "fallback": FALLBACK}
    jobs = [make_job(task, Candidate(src, backend="triton"), device="cpu", measure=Measure(timing=False))
            for src in sources.values()]
    # Only the default shape in the interpreter: the odd one is dry-launched for the compile.
    jobs.append(make_job(task, Candidate(HONEST, backend="triton"), device="cpu", measure=Measure(timing=False),
                         shapes=("default",)))
    names = [*sources, "default_only"]
    return dict(zip(names, evaluate_many(jobs, config, workers=2), strict=True))


def test_an_honest_triton_kernel_is_checked_in_the_interpreter_and_compiled_for_sm90a(verdicts):
    result = verdicts["honest"]
    assert result.status == Status.OK, result.error
    assert result.accepted
    declared = {r.shape for r in result.correctness if not r.shape.startswith("hidden-")}
    assert declared == {"default", "odd"}  # 201 columns: a ragged mask
    assert len({r.shape for r in result.correctness}) > 2  # and hidden shapes the evaluation drew
    assert all(r.passed for r in result.correctness)
    assert result.timing is None  # the interpreter is not timed
    assert result.compile.path == "triton-interpreter" and result.compile.arch == "sm_90a"
    # One build per specialisation, as the GPU's JIT would make: 256 columns are divisible by 16, 201 not.
    assert len(result.compile.resources) == 2
    for kernel in result.compile.resources:
        assert kernel.name == "_softmax_rows"
        assert kernel.registers and kernel.registers > 0
        assert kernel.spill_store_bytes == 0
    assert "sm_90a" in result.compile.log_tail


def test_shapes_left_out_of_the_interpreter_are_still_compiled_as_a_gpu_would_launch_them(verdicts):
    result = verdicts["default_only"]
    assert result.accepted
    assert {r.shape for r in result.correctness if not r.shape.startswith("hidden-")} == {"default"}
    # The odd shape (201 columns, not divisible by 16) was only dry-launched, yet its
    # specialisation was compiled beside the default one.
    assert len(result.compile.resources) == 2


def test_a_wrong_mask_is_a_mismatch(verdicts):
    result = verdicts["off_by_one"]
    assert result.status == Status.MISMATCH
    assert not result.accepted


def test_a_kernel_only_the_interpreter_can_run_fails_the_gpu_compile(verdicts):
    result = verdicts["interpreter_only"]
    assert all(r.passed for r in result.correctness)  # right in the interpreter
    assert result.status == Status.COMPILE_ERROR
    assert result.error.type == "TritonCompileError"
    assert "_softmax_rows" in result.error.message


def test_a_pytorch_answer_beside_a_launched_kernel_is_a_fallback(verdicts):
    result = verdicts["fallback"]
    assert not result.accepted
    assert "torch_fallback" in {f.rule for f in result.flags}
    assert any("softmax" in f.evidence for f in result.flags if f.rule == "torch_fallback")


BF16_PROBE = r'''
import json, sys
from agentforge.evaluator.worker import triton_interpret
triton_interpret.enable()
import torch, triton, triton.language as tl

@triton.jit
def ops(a, b, o, B: tl.constexpr):
    r = tl.arange(0, B)
    x = tl.load(a + r)
    y = tl.load(b + r)
    tl.store(o + 0 * B + r, x + y)
    tl.store(o + 1 * B + r, x * y)
    tl.store(o + 2 * B + r, tl.maximum(x, y))
    tl.store(o + 3 * B + r, tl.where(x < y, x, y))
    tl.store(o + 4 * B + r, -x)
    tl.store(o + 5 * B + r, x - y)
    tl.store(o + 6 * B + r, (x.to(tl.float32) * y.to(tl.float32)).to(tl.bfloat16))  # exact in fp32, then rounded

@triton.jit
def dot(a, b, c, B: tl.constexpr):
    r = tl.arange(0, B)
    x = tl.load(a + r[:, None] * B + r[None, :])
    y = tl.load(b + r[:, None] * B + r[None, :])
    tl.store(c + r[:, None] * B + r[None, :], tl.dot(x, y))

torch.manual_seed(0)
a = torch.randn(64, dtype=torch.bfloat16)
b = torch.randn(64, dtype=torch.bfloat16)
o = torch.empty(7 * 64, dtype=torch.bfloat16)
ops[(1,)](a, b, o, 64)
af, bf = a.float(), b.float()
want = torch.stack([af + bf, af * bf, torch.maximum(af, bf), torch.where(af < bf, af, bf), -af, af - bf,
                    af * bf]).bfloat16()
ma = torch.randn(16, 16, dtype=torch.bfloat16)
mb = torch.randn(16, 16, dtype=torch.bfloat16)
mc = torch.empty(16, 16)
dot[(1,)](ma, mb, mc, 16)
print(json.dumps({"elementwise_equal": torch.equal(o.view(7, 64), want),
                  "dot_err": (mc - ma.float() @ mb.float()).abs().max().item()}))
'''


def test_bf16_arithmetic_in_the_interpreter_matches_pytorch_bit_for_bit():
    done = subprocess.run([sys.executable, "-c", BF16_PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["elementwise_equal"], "bf16 +, *, max, compare/select, neg, - and fp32->bf16 must round like the GPU"
    assert report["dot_err"] < 1e-4, "bf16 tl.dot must multiply values, not bit patterns"


def test_a_launch_is_typed_as_the_gpu_compile_needs_it():
    import triton.language as tl
    from agentforge.evaluator.triton_aot import launch_spec

    def kernel(x_ptr, y_ptr, n, odd, unit, scale, big, BLOCK: tl.constexpr, FLAG: tl.constexpr):
        pass

    x = torch.zeros(32, dtype=torch.bfloat16)
    y = torch.zeros(32, dtype=torch.int64)
    spec = launch_spec(kernel, (x, y, 48, 47, 1, 0.5, 2**40), {"BLOCK": 128, "FLAG": None, "num_warps": 8})
    assert spec["kernel"] == "kernel"
    assert spec["signature"] == {"x_ptr": "*bf16", "y_ptr": "*i64", "n": "i32", "odd": "i32", "unit": "constexpr",
                                 "scale": "fp32", "big": "i64", "BLOCK": "constexpr", "FLAG": "constexpr"}
    # As the GPU's JIT specialises: a unit stride is a constant, 16-divisible sizes and aligned
    # pointers carry tt.divisibility (without it the compile would show slower code than a GPU runs).
    assert spec["constexprs"] == {"unit": 1, "BLOCK": 128, "FLAG": None}
    assert spec["options"] == {"num_warps": 8}
    assert set(spec["divisible"]) == {"x_ptr", "y_ptr", "n", "big"}
