"""What a run aims at (`agent.target`): beat torch.compile (the default), beat eager PyTorch, or
reach a fraction of the speed of light (`sol:0.8`), and how far a kernel is from it.

The judge reads `performance_text`: the kernel's time against eager, torch.compile and the
roofline floor, and the gap to the target. The stop rules read `reached` and `large_gap`: a correct
kernel slower than the target, far below the roofline, is not done while a budget remains.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentforge.evaluator.result import EvalResult
from agentforge.settings import AgentSettings

# A kernel below this share of speed of light spends most of its time above the floor: the gap is
# large, so a plateau is not a reason to stop while it is short of its target.
LARGE_GAP_SOL = 0.5
_FIELD = AgentSettings.__dataclass_fields__["target"].metadata  # the one definition of the forms
TARGET_PATTERN: str = _FIELD["pattern"]
TARGET_HELP: str = _FIELD["pattern_help"]


class TargetError(ValueError):
    """A target that is not one of the forms in TARGET_HELP."""


@dataclass(frozen=True)
class Target:
    kind: str  # compile | eager | sol
    fraction: float | None = None  # of speed of light, for sol

    def describe(self) -> str:
        if self.kind == "sol":
            return f"reach {self.fraction:.0%} of speed of light (the roofline floor's time / the kernel's time)"
        return "beat torch.compile" if self.kind == "compile" else "beat eager PyTorch"

    def reached(self, kernel: Mapping[str, Any]) -> bool | None:
        """Whether a kernel's figures meet the target; None when they cannot tell (no such
        measurement). A compile target without a torch.compile baseline reads eager instead."""
        if self.kind == "sol":
            sol = kernel.get("sol_fraction")
            return None if sol is None else sol >= (self.fraction or 1.0)
        speedup = kernel.get("speedup_vs_compile") if self.kind == "compile" else None
        speedup = speedup if speedup is not None else kernel.get("speedup")
        return None if speedup is None else speedup > 1.0


def parse_target(text: str) -> Target:
    """`compile`, `eager` or `sol:F`; TargetError for anything else."""
    value = text.strip().lower()
    if not re.fullmatch(TARGET_PATTERN, value):
        raise TargetError(f"target {text!r}: use {TARGET_HELP}")
    if value.startswith("sol:"):
        return Target("sol", float(value[4:]))
    return Target(value)


def large_gap(kernel: Mapping[str, Any]) -> bool:
    """A roofline gap known to be large (below LARGE_GAP_SOL of speed of light); unknown is not
    large: without a floor nothing says that more is to be had."""
    sol = kernel.get("sol_fraction")
    return sol is not None and sol < LARGE_GAP_SOL


def performance_text(target: Target, result: EvalResult | None, kernel: Mapping[str, Any]) -> str:
    """The kernel against eager, torch.compile, the roofline floor and the target, for the judge."""
    us = kernel.get("candidate_us")
    lines = [f"Target of this run: {target.describe()}."]
    if us is None:
        return "\n".join([*lines, "This kernel has no time measured: its gaps are unknown."])
    lines.append(f"This kernel: {us:.2f} us.")
    for name, base, speedup in (("eager PyTorch", kernel.get("eager_us"), kernel.get("speedup")),
                                ("torch.compile", kernel.get("compile_us"), kernel.get("speedup_vs_compile"))):
        if base and speedup:
            gap = "faster" if speedup > 1 else f"needs {1 - speedup:.0%} less time to match it"
            lines.append(f"- vs {name}: {base:.2f} us, {speedup:.2f}x ({gap})")
        else:
            lines.append(f"- vs {name}: not measured in this run")
    lines.append(_roofline_line(result, us))
    reached = target.reached(kernel)
    if reached:
        lines.append("Target reached: look for what still separates the kernel from the roofline floor.")
    elif reached is None:
        lines.append("Whether the target is reached cannot be told from these measurements.")
    else:
        lines.append("Target not reached: this kernel is correct but not done. Name the bottleneck that "
                     "keeps it from the target and the roofline floor, and the next technique that closes it.")
    return "\n".join(lines)


def _roofline_line(result: EvalResult | None, us: float) -> str:
    roof = result.roofline if result is not None else None
    if roof is None or not roof.floor_us:
        return ("- speed of light: unknown for this task (no FLOPs and bytes declared, or no ceilings for "
                "this device): reason from the reference's arithmetic and memory traffic instead")
    sol = roof.floor_us / us
    return (f"- speed of light: the roofline floor is {roof.floor_us:.2f} us ({roof.label}, "
            f"{roof.ceilings_source or 'unknown'} ceilings); this kernel reaches {sol:.0%} of it, "
            f"{us - roof.floor_us:.2f} us above the floor")
