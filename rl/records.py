"""RewardRecord: one scored completion, its reward's parts, and the measurement's provenance.

A reward without the GPU, versions and track it was measured under cannot be compared with
another, so every record carries them, copied from the `EvalResult` it was computed from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from agentforge.evaluator.result import EvalResult

# Status of a completion that never reached the evaluator: no `ModelNew` module in the reply.
NO_CODE = "no_code"


@dataclass(frozen=True)
class RewardRecord:
    task_name: str
    candidate_hash: str | None  # None when the reply held no code
    status: str  # an evaluator Status value, or "no_code"
    accepted: bool
    reward: float  # the shaped reward, before any group normalisation
    shaper: str
    components: dict[str, float] = field(default_factory=dict)  # the parts that add up to `reward`
    speedup: float | None = None  # eager / candidate, as measured
    speedup_vs_compile: float | None = None
    effective_speedup: float | None = None  # after the significance gate (1.0 inside the noise)
    significant: bool | None = None  # None when there was no timing to judge
    flags: tuple[str, ...] = ()  # integrity rules that fired
    # Where the reference-kernel tier's comparison came from: "timed" (a reference baseline timed
    # beside the candidate), "recorded" (the shipped kernel's record.json; meta["reference_record"]
    # names it), None (no reference known: the tier was out of reach).
    reference: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)  # gpu, versions, track, evaluator
    cached: bool = False
    summary: str = ""  # EvalResult.summary(): the verdict in one line, for multi-turn prompts
    meta: dict[str, Any] = field(default_factory=dict)  # the request's extra columns

    @property
    def flagged(self) -> bool:
        return bool(self.flags)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["flags"] = list(self.flags)
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), default=str)


def provenance_of(result: EvalResult) -> dict[str, Any]:
    """The parts of an evaluation's provenance a reward must keep to be comparable."""
    prov = result.provenance
    device = prov.device
    return {
        "evaluator_version": prov.evaluator_version,
        "track": prov.track,
        "backend": result.backend,
        "device_kind": device.kind if device else None,
        "gpu": device.name if device else None,
        "capability": device.capability if device else None,
        "driver": device.driver if device else None,
        "versions": dict(prov.versions),
        "host": prov.host,
        "sandbox": prov.sandbox,
        "started_at": prov.started_at,
    }
