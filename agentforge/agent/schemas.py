"""The judge's verdicts, and their strict parsing from the judge's reply.

A repair verdict (for a candidate that failed to compile, crashed, gave wrong output or was
flagged) names the critical issue, why it matters and the smallest fix. An optimise verdict (for
a correct candidate) names the bottleneck, the measurements that show it, one optimisation and a
plan. A reply that holds no well-formed verdict gives a fallback verdict marked `malformed`, built
from the evaluator's own report, so the loop goes on.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

MODES = ("repair", "optimise")


@dataclass(frozen=True)
class RepairVerdict:
    critical_issue: str
    why_it_matters: str
    smallest_fix: str
    malformed: str | None = None  # why the judge's reply was not used, for a fallback
    mode: str = "repair"

    def render(self) -> str:
        return (f"- Critical issue: {self.critical_issue}\n- Why it matters: {self.why_it_matters}\n"
                f"- Smallest fix: {self.smallest_fix}")


@dataclass(frozen=True)
class OptimiseVerdict:
    bottleneck: str
    evidence: tuple[str, ...]
    optimisation: str
    plan: tuple[str, ...]
    malformed: str | None = None
    mode: str = "optimise"

    def render(self) -> str:
        evidence = "; ".join(self.evidence) or "none cited"
        plan = "\n".join(f"  {i}. {step}" for i, step in enumerate(self.plan, 1))
        return (f"- Bottleneck: {self.bottleneck}\n- Evidence: {evidence}\n"
                f"- Optimisation: {self.optimisation}\n- Plan:\n{plan}")


Verdict = RepairVerdict | OptimiseVerdict

_JSON_FENCE = re.compile(r"```(?:json)?[ \t]*\n(.*?)```", re.S)
_REQUIRED = {
    "repair": {"critical_issue": str, "why_it_matters": str, "smallest_fix": str},
    "optimise": {"bottleneck": str, "evidence": list, "optimisation": str, "plan": list},
}


class VerdictError(ValueError):
    """A judge reply without a well-formed verdict of the expected mode."""


def parse_verdict(reply: str, mode: str) -> Verdict:
    """The verdict in the last JSON block of `reply`; VerdictError says what was wrong."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    blocks = _JSON_FENCE.findall(reply)
    if not blocks:
        raise VerdictError("the reply has no ```json block")
    try:
        data = json.loads(blocks[-1])
    except json.JSONDecodeError as exc:
        raise VerdictError(f"the JSON block does not parse: {exc.msg} at line {exc.lineno}") from exc
    if not isinstance(data, dict):
        raise VerdictError("the JSON block is not an object")
    if data.get("mode", mode) != mode:
        raise VerdictError(f"asked for a {mode} verdict, got mode {data.get('mode')!r}")
    for key, kind in _REQUIRED[mode].items():
        value = data.get(key)
        if not isinstance(value, kind) or not value:
            raise VerdictError(f"`{key}` is missing or not a non-empty {kind.__name__}")
        if kind is list and not all(isinstance(v, str) for v in value):
            raise VerdictError(f"`{key}` must be a list of strings")
    if mode == "repair":
        return RepairVerdict(data["critical_issue"], data["why_it_matters"], data["smallest_fix"])
    return OptimiseVerdict(data["bottleneck"], tuple(data["evidence"]), data["optimisation"],
                           tuple(data["plan"]))


def fallback_verdict(mode: str, reason: str, report: str) -> Verdict:
    """A verdict from the evaluator's report alone, for when the judge gave none usable."""
    first = next((line.strip() for line in report.splitlines() if line.strip()), "see the report")
    if mode == "repair":
        return RepairVerdict(
            critical_issue=first[:500], why_it_matters="the kernel is not accepted until this is fixed",
            smallest_fix="read the evaluator's report above and fix the first error it names",
            malformed=reason,
        )
    return OptimiseVerdict(
        bottleneck="not diagnosed (the judge's reply was unusable)", evidence=(first[:300],),
        optimisation="improve memory access and parallelism of the hottest loop",
        plan=("keep the kernel correct", "make one change and measure it"), malformed=reason,
    )


def verdict_to_dict(verdict: Verdict) -> dict[str, Any]:
    return asdict(verdict)


def verdict_from_dict(data: dict[str, Any]) -> Verdict:
    if data["mode"] == "repair":
        return RepairVerdict(**data)
    return OptimiseVerdict(**{**data, "evidence": tuple(data["evidence"]), "plan": tuple(data["plan"])})
