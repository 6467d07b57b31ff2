"""`RunSpec`: what an optimisation run measures and how it searches, fixed when the run starts.

The CLI (`optimize`, `leaderboard run`) builds one from its options, `agent.run.optimize` takes it
as one value, validates it once, writes it into the run's `run.json` and, on `--resume`, reads it
back from there: a resumed run keeps what it began with, whatever the new command line says. The
keys in `run.json` are the ones runs have always written, so older runs resume unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from agentforge.evaluator.result import TimingConfig

KNOWN_BASELINES = ("eager", "compile")


class RunSpecError(ValueError):
    """A spec no run can start with; the message names the field and what it accepts."""


@dataclass(frozen=True)
class RunSpec:
    baselines: tuple[str, ...] = ("eager", "compile")  # what the candidate is timed against
    compile_modes: tuple[str, ...] | None = None  # torch.compile modes; None: the evaluator's default
    timing: TimingConfig | None = None  # None: the evaluator's default
    shapes: tuple[str, ...] = ()  # the shape variants checked, the first one timed; (): all
    candidates: int = 1  # proposals per round (above 1: the parallel search)
    beam: int = 1  # the best kernels carried to the next round
    skills: bool = True  # technique notes in the coder's prompt
    exemplars: bool = True  # the results store's scored kernels of similar tasks in the prompt
    review: bool = False  # pause for a person before each paid round

    def __post_init__(self) -> None:
        for name in ("baselines", "shapes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.compile_modes is not None:
            object.__setattr__(self, "compile_modes", tuple(self.compile_modes) or None)
        unknown = [b for b in self.baselines if b not in KNOWN_BASELINES]
        if unknown:
            raise RunSpecError(f"unknown baseline(s) {unknown}: choose from {list(KNOWN_BASELINES)}")
        if self.candidates < 1 or self.beam < 1:
            raise RunSpecError(f"--candidates and --beam must be at least 1 (got {self.candidates} and {self.beam})")

    def to_meta(self) -> dict[str, Any]:
        """The spec's part of `run.json`."""
        return {"baselines": list(self.baselines), "compile_modes": list(self.compile_modes or ()) or None,
                "timing": dataclasses.asdict(self.timing) if self.timing else None, "shapes": list(self.shapes),
                "search": {"candidates": self.candidates, "beam": self.beam},
                "knowledge": {"skills": self.skills, "exemplars": self.exemplars}, "review": self.review}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> RunSpec:
        """The spec a run was started with, from its `run.json` (defaults for keys an older run lacks)."""
        search, knowledge = meta.get("search") or {}, meta.get("knowledge") or {}
        return cls(baselines=tuple(meta.get("baselines") or cls.baselines),
                   compile_modes=tuple(meta["compile_modes"]) if meta.get("compile_modes") else None,
                   timing=TimingConfig(**meta["timing"]) if meta.get("timing") else None,
                   shapes=tuple(meta.get("shapes") or ()),
                   candidates=int(search.get("candidates", 1)), beam=int(search.get("beam", 1)),
                   skills=bool(knowledge.get("skills", True)), exemplars=bool(knowledge.get("exemplars", True)),
                   review=bool(meta.get("review", False)))
