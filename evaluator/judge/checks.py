"""Integrity evidence, collected by registered checks.

Each check reads what one stage left (`Evidence`: the static findings, what the correctness stage
saw, what the worker's watches reported at `finish`, as data) and returns (rule, evidence) pairs.
`collect` runs every registered check in order; the pipeline turns the pairs into flags. A new
kind of evidence is a new `@check`, not another branch in the pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agentforge.evaluator import build_cache, integrity
from agentforge.evaluator.guards import compute_ops
from agentforge.evaluator.judge import elf_needed

from agentforge.task import Task

Finding = tuple[str, str]  # (rule, evidence)


@dataclass
class Evidence:
    task: Task
    static: list[integrity.StaticFinding] = field(default_factory=list)
    observed: list[Finding] = field(default_factory=list)  # the correctness stage's own findings
    final: dict[str, Any] = field(default_factory=dict)  # the worker's `finish` reply, read as data


Check = Callable[[Evidence], Iterable[Finding]]
CHECKS: dict[str, Check] = {}


def check(name: str) -> Callable[[Check], Check]:
    """Register a check under `name` (once: a second registration of a name is a mistake)."""

    def register(fn: Check) -> Check:
        if name in CHECKS:
            raise ValueError(f"integrity check {name!r} is registered twice")
        CHECKS[name] = fn
        return fn

    return register


def collect(evidence: Evidence) -> list[Finding]:
    """Every registered check's findings, in registration order, each pair once."""
    found: list[Finding] = []
    for fn in CHECKS.values():
        for pair in fn(evidence):
            if pair not in found:
                found.append(pair)
    return found


@check("static")
def _static(ev: Evidence) -> Iterable[Finding]:
    """The source and the builds as written: every static finding rejects."""
    return [(f.rule, f.evidence) for f in ev.static]


@check("reported")
def _reported(ev: Evidence) -> Iterable[Finding]:
    """What the correctness stage and the worker's watches found, under a rule the judge knows: a rule
    the worker made up is dropped, not trusted."""
    return [(rule, text) for rule, text in [*ev.observed, *ev.final.get("evidence", [])] if rule in integrity.RULES]


@check("native_libraries")
def _native_libraries(ev: Evidence) -> Iterable[Finding]:
    """Libraries the candidate opened and symbols it resolved through ctypes (the worker's audit
    hook), and what those libraries link against (read here, from the files)."""
    final = ev.final
    opened = [str(x)[:500] for x in final.get("opened", []) if isinstance(x, str)][:200]
    symbols = [(str(p[0])[:500], str(p[1])[:200]) for p in final.get("symbols", [])
               if isinstance(p, list | tuple) and len(p) == 2][:2000]
    found = integrity.native_findings(opened, symbols, elf_needed.needed([p for p in opened if p.startswith("/")]),
                                      own=str(build_cache.cache_root()), mapped=final.get("mapped_since_setup", []),
                                      written=final.get("code_it_wrote", []))
    return [(f.rule, f.evidence) for f in found]


def _ops_check(key: str, rule: str, said: str) -> Check:
    def run(ev: Evidence) -> Iterable[Finding]:
        compute = compute_ops(counts(ev.final.get(key)), ev.task.allowed_torch_ops)
        if not compute:
            return []
        listed = ", ".join(f"{op} x{n}" for op, n in sorted(compute.items(), key=lambda kv: -kv[1])[:8])
        return [(rule, f"{said}: {listed}")]

    return run


check("dispatched_ops")(_ops_check("op_counts", "torch_fallback", "ModelNew.forward dispatched PyTorch compute"))
check("observed_ops")(_ops_check("observed_ops", "torch_fallback",
                                 "torch's C++ observer saw PyTorch compute inside ModelNew's calls"))
check("background_ops")(_ops_check("background_ops", "background_work",
                                   "PyTorch compute on other threads between ModelNew's calls"))


def counts(raw: Any) -> dict[str, int]:
    """Operator counts from the worker, kept only where they are what they claim to be."""
    if not isinstance(raw, dict):
        return {}
    return {str(k)[:200]: v for k, v in list(raw.items())[:5000] if type(v) is int and v >= 0}
