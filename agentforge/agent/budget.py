"""When the loop stops: rounds, dollars, wall time, a plateau, or a kernel near speed of light.

A plateau ends a run only when its best kernel met the run's target (`agent.target`), or when it
is short of it but its roofline gap is not known to be large: a correct kernel slower than the
target, far below speed of light, is not done while a budget remains."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentforge.agent.target import large_gap, parse_target
from agentforge.settings import AgentSettings


def stop_reason(state: Mapping[str, Any], limits: AgentSettings, planned_rounds: int | None = None
                ) -> str | None:
    """Why the loop should stop now, or None to go on. Checked after every round."""
    rounds = int(state.get("round", 0))
    cost = float((state.get("usage") or {}).get("cost_usd", 0.0))
    minutes = float(state.get("elapsed_s", 0.0)) / 60.0
    best = state.get("best") or {}
    sol = best.get("sol_fraction")
    if rounds >= limits.max_rounds:
        return f"rounds: {rounds} of {limits.max_rounds} done"
    if planned_rounds is not None and rounds >= planned_rounds:
        return f"rounds: every one of the provider's {planned_rounds} proposals was tried"
    if cost >= limits.max_cost_usd:
        return f"cost: ${cost:.4f} reached the budget of ${limits.max_cost_usd:.4f}"
    if minutes >= limits.max_minutes:
        return f"time: {minutes:.1f} min reached the budget of {limits.max_minutes:g} min"
    target = parse_target(limits.target)
    plateau = bool(best) and int(state.get("flat_rounds", 0)) >= limits.plateau_rounds
    if plateau and (target.reached(best) or not large_gap(best)):
        return f"plateau: no improvement in {state.get('flat_rounds')} rounds"
    if sol is not None and sol >= limits.sol_stop:
        return f"speed of light: the best kernel reaches {sol:.0%} (stop at {limits.sol_stop:.0%})"
    if target.kind == "sol" and target.reached(best):
        return f"target reached: the best kernel reaches {sol:.0%} of speed of light (target {limits.target})"
    return None
