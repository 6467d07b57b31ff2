"""Candidate kernels for the graph tests: a tiny float32 ReLU task and honest lean C++ kernels
(`agentforge.evaluator.native.load_cpp`), each a KernelBench answer module."""

from __future__ import annotations

import json
from typing import Any

TASK = '''
import torch

N = 1 << 16
SHAPES = {"odd": {"N": 1000}}


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
'''

_TEMPLATE = '''import ctypes

import torch
from agentforge.evaluator.native import load_cpp

SOURCE = r"""
{body}
"""
lib = load_cpp("{name}", SOURCE, extra_cflags={flags!r}, openmp=False)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        lib.relu(ctypes.c_void_p(x.data_ptr()), ctypes.c_void_p(y.data_ptr()), ctypes.c_long(x.numel()))
        return y
'''

_RELU = '''extern "C" void relu(const float* x, float* y, long n) {
    for (long i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}'''


def kernel(name: str, body: str = _RELU, flags: tuple[str, ...] = ()) -> str:
    return _TEMPLATE.format(name=name, body=body, flags=list(flags))


# A scalar loop built without optimisation: correct, and slow.
SLOW = kernel("relu_slow", flags=("-O0",))
# The same loop at -O3 -march=native (the evaluator's default flags): the compiler vectorises it.
FAST = kernel("relu_fast")
# Does not compile: a missing semicolon.
BROKEN = kernel("relu_broken", body=_RELU.replace("0.0f;\n}", "0.0f\n}"))
# Compiles, then writes through a null pointer: the child dies with SIGSEGV.
CRASH = kernel("relu_crash", body='extern "C" void relu(const float* x, float* y, long n) '
                                  '{ volatile float* p = nullptr; for (long i = 0; i < n; ++i) p[i] = x[i]; }')


def fenced(code: str, prose: str = "Here is the kernel.") -> str:
    return f"{prose}\n\n```python\n{code}```\n"


def judge_json(verdict: dict[str, Any]) -> str:
    return "My analysis.\n\n```json\n" + json.dumps(verdict) + "\n```\n"


def repair_verdict(issue: str) -> str:
    return judge_json({"mode": "repair", "critical_issue": issue, "why_it_matters": "it must build",
                       "smallest_fix": "add the missing semicolon"})


def optimise_verdict(what: str) -> str:
    return judge_json({"mode": "optimise", "bottleneck": "scalar loop at -O0",
                       "evidence": ["candidate slower than eager"], "optimisation": what,
                       "plan": ["drop -O0", "let the compiler vectorise"]})
