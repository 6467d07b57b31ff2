"""Candidate kernels for the graph tests: a tiny float32 ReLU task and honest lean C++ kernels
(`agentforge.evaluator.native.load_cpp`), each a KernelBench answer module."""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures import relu

TASK = relu.task(1 << 16, {"odd": {"N": 1000}})
_RELU = relu.RELU_LOOP


def kernel(name: str, body: str = _RELU, flags: tuple[str, ...] = ()) -> str:
    return relu.lean_candidate(name, body, flags)


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


# ----- fakes for the loop-logic tests (no compiler, no sandbox) ---------------------------------
def fake_kernel(tag: str, **figures: Any) -> str:
    """A module whose first line tells `fake_evaluate` what to report for it."""
    meta = " ".join(f"{k}={v}" for k, v in {"tag": tag, **figures}.items())
    return f"# fake: {meta}\nfrom agentforge.evaluator.native import load_cpp\n\nclass ModelNew:\n    pass\n"


def fake_evaluate(task: Any, candidate: Any) -> Any:
    """An EvalResult shaped like the evaluator's, from the figures in the candidate's first line."""
    from agentforge.evaluator.result import (
        CompileRecord,
        CorrectnessRecord,
        ErrorRecord,
        EvalResult,
        RooflineRecord,
        Stage,
        Status,
        TimingRecord,
        TimingStats,
    )

    line = candidate.source.splitlines()[0].removeprefix("# fake:").split()
    figures = dict(item.split("=", 1) for item in line)
    status = Status(figures.get("status", "ok"))
    if status != Status.OK:
        return EvalResult(task.name, candidate.code_hash, candidate.backend, status, Stage.BUILD,
                          compile=CompileRecord(ok=False, backend="cpu", log_tail="error: expected ';'"),
                          error=ErrorRecord("BuildError", "g++ failed"))

    def stats(us: float) -> TimingStats:
        return TimingStats(us, us, 0.0, us, us, 10, 0.001)

    us = float(figures.get("us", 10.0))
    sol = float(figures["sol"]) if "sol" in figures else None
    return EvalResult(
        task.name, candidate.code_hash, candidate.backend, Status.OK, Stage.DONE,
        compile=CompileRecord(ok=True, backend="cpu"),
        correctness=(CorrectnessRecord("default", 42, True, 0.0, 0.0),),
        timing=TimingRecord("default", "host-monotonic", stats(us), {"eager": stats(100.0)}),
        roofline=RooflineRecord(1.0, 1.0, us * (sol or 0.1), 1.0, sol, "memory-bound", "datasheet"),
    )


class FakeProvider:
    """Replies from a list per role, in order; records the prompts it was given."""

    name = "fake"

    def __init__(self, coder: list[str], judge: list[str] | None = None):
        self.coder, self.judge = list(coder), list(judge or [])
        self.prompts: list[tuple[str, str]] = []

    def complete(self, messages: Any, *, model: Any = None, role: str = "coder", max_tokens: Any = None,
                 temperature: Any = None) -> Any:
        from agentforge.llm.base import Completion, Usage

        self.prompts.append((role, messages[-1].content))
        queue = self.coder if role == "coder" else self.judge
        text = queue.pop(0) if queue else (optimise_verdict("more") if role == "judge" else "no code")
        return Completion(text=text, model="fake-model", usage=Usage(100, 50, 0.001))
