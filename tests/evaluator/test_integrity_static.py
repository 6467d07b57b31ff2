"""The static (AST) integrity rules: each with a source that must fire and a near miss that must not."""

from __future__ import annotations

import pytest
from agentforge.evaluator import integrity

HONEST = '''
"""ReLU without --use_fast_math or cuBLAS: exact IEEE results."""
import ctypes
import torch
from torch import nn
from agentforge.evaluator.native import load_cpp

SOURCE = r"""
// no fast math here: exact IEEE semantics
extern "C" void relu(const float* x, float* y, long n) { for (long i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0; }
"""
_lib = load_cpp("relu", SOURCE, extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 1.0

    def forward(self, x):
        _ = [m for m in self.modules()]
        try:
            y = torch.empty_like(x)
        except RuntimeError:
            raise
        _lib.relu(x.data_ptr(), y.data_ptr(), x.numel())
        self.cache = {}
        return y
'''

# rule -> (a source that must fire, a near miss that must not)
CASES: dict[str, tuple[str, str]] = {
    "reference_reuse": ("class ModelNew(Model):\n    pass\n", "class ModelNew(nn.Module):\n    pass\n"),
    "try_except_fallback": ("try:\n    y = k(x)\nexcept Exception:\n    y = torch.relu(x)\n",
                            "try:\n    y = k(x)\nexcept Exception:\n    raise ValueError('kernel failed')\n"),
    "forbidden_introspection": ("import sys\nf = sys._getframe(1)\n", "import sys\nn = sys.maxsize\n"),
    "background_work": ("import threading\n", "import ctypes\n"),
    "monkey_patch": ("import torch\ntorch.allclose = lambda *a, **k: True\n", "import torch\nx = torch.allclose\n"),
    "dynamic_import": ("m = __import__('thread' + 'ing')\n", "m = len('threading')\n"),
    "library_fallback": ("import numpy as np\n", "import math\n"),
    "fast_math": ('SRC = "#pragma GCC optimize(\\"fast-math\\")"\n', 'SRC = "// fast-math is forbidden here"\n'),
}

MORE_POSITIVES: list[tuple[str, str]] = [
    ("reference_reuse", "from task import Model\n"),
    ("reference_reuse", "import sys\nm = sys.modules['t'].Model\n"),
    ("reference_reuse", "cls = getattr(module, 'Model')\n"),
    ("reference_reuse", "self.ref = Model()\n"),
    ("try_except_fallback", "try:\n    y = k(x)\nexcept:\n    y = F.linear(x, w)\n"),
    ("forbidden_introspection", "import gc\n"),
    ("forbidden_introspection", "import inspect\n"),
    ("forbidden_introspection", "import sys\nmods = sys.modules\n"),
    ("forbidden_introspection", "import sys as s\nmods = s.modules['x']\n"),
    ("forbidden_introspection", "from agentforge.evaluator import compare\n"),
    ("forbidden_introspection", "import agentforge.evaluator.judge.stage_correctness as sc\n"),
    ("forbidden_introspection", "frame = f.f_back\n"),
    ("background_work", "import multiprocessing\n"),
    ("background_work", "from concurrent.futures import ThreadPoolExecutor\n"),
    ("background_work", "import subprocess\n"),
    ("background_work", "import os\npid = os.fork()\n"),
    ("background_work", "import os as o\no.system('sleep 10 &')\n"),
    ("monkey_patch", "import time\ntime.perf_counter = lambda: 0.0\n"),
    ("monkey_patch", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n"),
    ("monkey_patch", "import torch\nsetattr(torch, 'allclose', f)\n"),
    ("monkey_patch", "setattr(obj, name, f)\n"),
    ("monkey_patch", "compare.__code__ = f.__code__\n"),
    ("monkey_patch", "import agentforge.evaluator.judge.compare as c\nc.compare = f\n"),
    ("monkey_patch", "from agentforge.evaluator import stage_correctness\nstage_correctness.compare = f\n"),
    ("monkey_patch", "import torch as T\nT.Tensor.sub = f\n"),
    ("dynamic_import", "import importlib\n"),
    ("dynamic_import", "m = importlib.import_module('x')\n"),
    ("dynamic_import", "import builtins\nimp = getattr(builtins, '__import__')\n"),
    ("library_fallback", "import scipy.linalg\n"),
    ("library_fallback", "y = x.numpy()\n"),
    ("library_fallback", 'SRC = "cblas_sgemm(CblasRowMajor, ...);"\n'),
    ("library_fallback", 'SRC = "cublasSgemm(handle, ...);"\n'),
    ("fast_math", 'flags = ["-O3", "--use_fast_math"]\n'),
    ("fast_math", 'flags = ["-Ofast"]\n'),
    ("fast_math", 'flags = ["-fassociative-math"]\n'),
    ("fast_math", 'SRC = "__attribute__((optimize(\\"-ffast-math\\"))) float f(float x);"\n'),
    ("fast_math", 'flags = ["-prec-div=false"]\n'),
    ("monkey_patch", "import torch\nvars(torch)['relu'] = f\n"),
    ("monkey_patch", "torch.__dict__['relu'] = f\n"),
    ("forbidden_introspection", "from agentforge.evaluator.native import BUILD_EVENTS\n"),
    ("forbidden_introspection", "import agentforge.evaluator.native as n\nn.BUILD_EVENTS.clear()\n"),
    ("forbidden_introspection", "load_cpp.__globals__['FORBIDDEN_FLAGS'] = ()\n"),
]


def rules(source: str) -> set[str]:
    return {f.rule for f in integrity.static_findings(source)}


@pytest.mark.parametrize("rule", sorted(CASES))
def test_rule_fires_on_its_positive_and_not_on_its_near_miss(rule: str) -> None:
    positive, negative = CASES[rule]
    assert rule in rules(positive)
    assert rule not in rules(negative)


@pytest.mark.parametrize(("rule", "source"), MORE_POSITIVES,
                         ids=[f"{r}-{i}" for i, (r, _) in enumerate(MORE_POSITIVES)])
def test_more_positives(rule: str, source: str) -> None:
    assert rule in rules(source), integrity.static_findings(source)


def test_an_honest_lean_cpp_candidate_raises_nothing() -> None:
    assert integrity.static_findings(HONEST) == []


def test_evidence_names_the_line() -> None:
    (finding,) = [f for f in integrity.static_findings("x = 1\nimport threading\n") if f.rule == "background_work"]
    assert "line 2" in finding.evidence


def test_a_syntax_error_is_not_an_integrity_matter() -> None:
    assert integrity.static_findings("def broken(:\n") == []


def test_every_static_rule_is_registered() -> None:
    assert set(CASES) <= set(integrity.RULES)


def test_flag_refuses_unknown_rules() -> None:
    assert integrity.flag("torch_fallback", "aten::relu x1").severity == "reject"
    assert integrity.flag("speedup_over_10x", "12x", severity="audit").severity == "audit"
    with pytest.raises(KeyError, match="unknown integrity rule"):
        integrity.flag("made_up", "")


def test_findings_are_deduplicated() -> None:
    findings = integrity.static_findings("import threading\nimport threading\n")
    assert len([f for f in findings if f.rule == "background_work"]) == 2  # two lines, two pieces of evidence
    assert len(integrity.static_findings("x = Model\n")) == 1


def test_build_findings_read_what_the_compiler_got() -> None:
    from agentforge.evaluator.native import BuildEvent

    assembled = BuildEvent("lean-cpp", "k", True, 0.1, False, sources={"cpp": "int f();"},
                           flags=("-O3", "-fassociative-math"))
    pragma = BuildEvent("load_inline", "k2", True, 0.1, False,
                        sources={"cpp": "#pragma GCC optimize(\"O3\")\nint f();", "cuda": ""}, flags=("|", "|"))
    blas = BuildEvent("lean-cpp", "k3", True, 0.1, False, sources={"cpp": "cblas_sgemm(0);"}, flags=())
    honest = BuildEvent("lean-cpp", "k4", True, 0.1, False,
                        sources={"cpp": "// not -ffast-math\nint f();"}, flags=("-O3", "-march=native", "-fopenmp"))
    found = {(f.rule, f.evidence.split(":")[0]) for f in integrity.build_findings([assembled, pragma, blas, honest])}
    assert found == {("fast_math", "build k"), ("fast_math", "build k2"), ("library_fallback", "build k3")}
