"""Rewards from an `EvalResult`: a gate, a significance gate, and a shaper chosen by name.

Rewards read measurements; they never compile or time anything. Each piece is a small frozen
dataclass, so a `Rewarder` pickles into Ray workers and verl's reward loop unchanged.

    task error    the task failed on its own (status task_error: it did not import, or its inputs
                  or reference failed) -> `task_error_reward` (default 0) for every completion of
                  it: not the completion's doing, and equal rewards give its group no signal
    gate          not accepted (any status but ok, not compiled, not correct, or any integrity
                  flag) -> a fixed negative reward (`failure_reward`, default -1)
    significance  a speedup whose log lies within `noise_sigmas` standard errors of zero
                  (the evaluator's rel_stderr of candidate and baseline, combined) counts as 1.0
    shaper        turns the accepted, significance-gated speedups into reward components:
                  log_speedup (CUDA-L1), milestones (CUDA Agent), bonus_speedup (Kevin)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from agentforge.evaluator.result import EvalResult, Status, TimingStats
from agentforge.rl.records import NO_CODE, RewardRecord, provenance_of


class RewardConfigError(ValueError):
    """A reward configuration that cannot work; the message says what to set."""


# ----- the significance gate ----------------------------------------------------------------
@dataclass(frozen=True)
class Significance:
    """A ratio of two timings is a gain only when it stands out of their combined noise."""

    noise_sigmas: float = 2.0  # how many combined standard errors a gain must clear
    noise_floor: float = 0.01  # minimum relative noise assumed, whatever the stats claim

    def threshold(self, a: TimingStats | None, b: TimingStats | None) -> float:
        """The |log ratio| below which a ratio of `a` and `b` is noise."""
        ra = a.rel_stderr if a is not None else 0.0
        rb = b.rel_stderr if b is not None else 0.0
        sigma = max(math.hypot(ra, rb), self.noise_floor)
        return self.noise_sigmas * sigma

    def effective(self, ratio: float, threshold: float) -> tuple[float, bool]:
        """(ratio, True) when it clears the noise, else (1.0, False): no gain and no loss."""
        if ratio <= 0 or not math.isfinite(ratio):
            return 1.0, False
        if abs(math.log(ratio)) <= threshold:
            return 1.0, False
        return ratio, True


@dataclass(frozen=True)
class Measured:
    """What a shaper sees of an accepted candidate: speedups after the significance gate."""

    speedup: float  # raw eager / candidate
    effective: float  # vs eager, 1.0 inside the noise
    significant: bool
    vs_compile: float | None = None  # vs the best torch.compile mode, gated; None if not timed
    vs_reference: float | None = None  # vs the shipped reference kernel, gated; None if unknown
    reference_from: str | None = None  # "timed" (a reference baseline in the result), "recorded", None


# ----- shapers ------------------------------------------------------------------------------
SHAPERS: dict[str, type[Shaper]] = {}


def register_shaper(name: str) -> Callable[[type[Shaper]], type[Shaper]]:
    def add(cls: type[Shaper]) -> type[Shaper]:
        cls.name = name
        SHAPERS[name] = cls
        return cls
    return add


@dataclass(frozen=True)
class Shaper:
    """Accepted measurements in, named reward components out (their sum is the reward)."""

    name: ClassVar[str] = ""

    def __call__(self, m: Measured) -> dict[str, float]:
        raise NotImplementedError

    def min_reward(self) -> float:
        """The least an accepted candidate can score; must beat the failure reward."""
        raise NotImplementedError


@register_shaper("log_speedup")
@dataclass(frozen=True)
class LogSpeedup(Shaper):
    """CUDA-L1's manner: log of the speedup, clipped, so 2x faster and 2x slower are symmetric
    and a freak 50x cannot dominate a batch."""

    low: float = -0.5
    high: float = 2.0

    def __call__(self, m: Measured) -> dict[str, float]:
        return {"speed": min(max(math.log(m.effective), self.low), self.high)}

    def min_reward(self) -> float:
        return self.low


@register_shaper("milestones")
@dataclass(frozen=True)
class Milestones(Shaper):
    """CUDA Agent's stepped reward: correct, then faster than eager by a margin, then also
    faster than the best torch.compile, then also faster than the shipped reference kernel.
    Robust to timing noise because only crossing a line changes the reward.

    `skip_untimed_compile`: when the job did not time torch.compile (on a CPU its compile costs
    tens of seconds per evaluation), the compile line is skipped instead of ending the ladder, so
    a kernel faster than eager and than the reference kernel still reaches `beats_reference`.
    Off by default: a ladder with a missing rung is a weaker claim, and the config must say so."""

    correct: float = 1.0
    beats_eager: float = 2.0
    beats_compile: float = 3.0
    beats_reference: float = 4.0
    eager_margin: float = 1.05  # "more than 5 % faster than eager"
    skip_untimed_compile: bool = False

    def __call__(self, m: Measured) -> dict[str, float]:
        parts = {"correct": self.correct}
        if m.effective <= self.eager_margin:
            return parts
        parts["beats_eager"] = self.beats_eager - self.correct
        below = self.beats_eager
        if m.vs_compile is None and self.skip_untimed_compile:
            pass  # not measured, and the config says to step over it
        elif m.vs_compile is None or m.vs_compile <= 1.0:
            return parts
        else:
            parts["beats_compile"] = self.beats_compile - self.beats_eager
            below = self.beats_compile
        if m.vs_reference is not None and m.vs_reference > 1.0:
            parts["beats_reference"] = self.beats_reference - below
        return parts

    def min_reward(self) -> float:
        return self.correct


@register_shaper("bonus_speedup")
@dataclass(frozen=True)
class BonusSpeedup(Shaper):
    """Kevin's reward: a fixed bonus for a correct kernel plus its speedup (capped)."""

    bonus: float = 0.3
    max_speedup: float = 10.0

    def __call__(self, m: Measured) -> dict[str, float]:
        return {"correct": self.bonus, "speed": min(m.effective, self.max_speedup)}

    def min_reward(self) -> float:
        return self.bonus


def make_shaper(name: str, **params: Any) -> Shaper:
    if name not in SHAPERS:
        raise RewardConfigError(f"unknown reward shaper {name!r}; choose one of {', '.join(sorted(SHAPERS))}")
    try:
        return SHAPERS[name](**params)
    except TypeError as exc:
        raise RewardConfigError(f"reward shaper {name!r}: {exc}") from exc


# ----- the reward ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RewardConfig:
    shaper: str = "milestones"
    shaper_params: dict[str, Any] = field(default_factory=dict)
    failure_reward: float = -1.0  # not compiled, incorrect, crashed, timed out or flagged
    no_code_reward: float | None = None  # a reply with no ModelNew module; None: failure_reward
    task_error_reward: float = 0.0  # the task failed on its own: the same for every completion of it
    noise_sigmas: float = 2.0
    noise_floor: float = 0.01
    gate_audit_flags: bool = True  # audit-severity integrity flags gate too, not only rejecting ones

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardConfig:
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise RewardConfigError(f"[reward] has no settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)


@dataclass(frozen=True)
class Rewarder:
    """Gate, significance gate and shaper together: `EvalResult` -> `RewardRecord`."""

    config: RewardConfig
    shaper: Shaper
    significance: Significance

    def score(self, result: EvalResult, reference_speedup: float | None = None,
              meta: dict[str, Any] | None = None, cached: bool = False) -> RewardRecord:
        """The reward of one evaluation. `reference_speedup` is the shipped reference kernel's
        measured speedup vs eager for the task, when one is known and no direct timing of it
        is in the result."""
        flags = tuple(f.rule for f in result.flags if self.config.gate_audit_flags or f.severity == "reject")
        base = dict(
            task_name=result.task_name, candidate_hash=result.candidate_hash, status=result.status.value,
            shaper=self.shaper.name, flags=flags, provenance=provenance_of(result), cached=cached,
            meta=dict(meta or {}), summary=result.summary(),
        )
        if result.status == Status.TASK_ERROR:
            reward = self.config.task_error_reward
            why = f"{result.error.type}: {result.error.message}" if result.error is not None else "task error"
            base["meta"]["task_error"] = why
            return RewardRecord(accepted=False, reward=reward, components={"task_error": reward}, **base)
        if not result.accepted or flags:
            gate = self.config.failure_reward
            return RewardRecord(accepted=False, reward=gate, components={"gate": gate}, **base)
        # Accepted but not timed (timing switched off): correct, and no gain measured.
        measured = self.measure(result, reference_speedup) or Measured(1.0, 1.0, False)
        parts = self.shaper(measured)
        return RewardRecord(
            accepted=True, reward=float(sum(parts.values())), components=parts,
            speedup=result.speedup, speedup_vs_compile=result.speedup_vs_compile,
            effective_speedup=measured.effective, significant=measured.significant,
            reference=measured.reference_from, **base,
        )

    def no_code(self, task_name: str, meta: dict[str, Any] | None = None) -> RewardRecord:
        reward = self.config.no_code_reward
        reward = self.config.failure_reward if reward is None else reward
        return RewardRecord(
            task_name=task_name, candidate_hash=None, status=NO_CODE, accepted=False, reward=reward,
            shaper=self.shaper.name, components={"gate": reward}, meta=dict(meta or {}),
        )

    def measure(self, result: EvalResult, reference_speedup: float | None = None) -> Measured | None:
        """Significance-gated speedups of an accepted result; None when it has no timing, or when
        its timing is overhead-bound (within 20x of the harness floor): such a pair claims no
        speedup here, as in the verdict's headline, the CLI and the leaderboard."""
        timing = result.timing
        speedup = result.headline_speedup
        if timing is None or speedup is None:
            return None
        cand = timing.candidate
        sig = self.significance
        eager_thr = sig.threshold(cand, timing.baselines.get("eager"))
        effective, significant = sig.effective(speedup, eager_thr)
        vs_compile = None
        compile_stats = _best_compile(timing.baselines)
        if compile_stats is not None and cand.median_us > 0:
            vs_compile, _ = sig.effective(compile_stats.median_us / cand.median_us,
                                          sig.threshold(cand, compile_stats))
        vs_reference, reference_from = None, None
        ref_stats = timing.baselines.get("reference")
        if ref_stats is not None and cand.median_us > 0:
            vs_reference, _ = sig.effective(ref_stats.median_us / cand.median_us,
                                            sig.threshold(cand, ref_stats))
            reference_from = "timed"
        elif reference_speedup is not None and reference_speedup > 0:
            # Across processes only ratios compare: ours vs eager against the shipped one's.
            vs_reference, _ = sig.effective(speedup / reference_speedup, eager_thr)
            reference_from = "recorded"
        return Measured(speedup=speedup, effective=effective, significant=significant,
                        vs_compile=vs_compile, vs_reference=vs_reference, reference_from=reference_from)


def _best_compile(baselines: dict[str, TimingStats]) -> TimingStats | None:
    modes = [s for k, s in baselines.items() if k.startswith("compile")]
    return min(modes, key=lambda s: s.median_us) if modes else None


def build_rewarder(config: RewardConfig | None = None) -> Rewarder:
    """Validate a reward configuration once, at configuration time."""
    config = config or RewardConfig()
    shaper = make_shaper(config.shaper, **config.shaper_params)
    if shaper.min_reward() <= config.failure_reward:
        raise RewardConfigError(
            f"shaper {config.shaper!r} can give an accepted kernel {shaper.min_reward()}, not more than "
            f"failure_reward {config.failure_reward}: a slow correct kernel must beat a broken one"
        )
    if config.noise_sigmas < 0 or config.noise_floor < 0:
        raise RewardConfigError("noise_sigmas and noise_floor must be >= 0")
    return Rewarder(config=config, shaper=shaper,
                    significance=Significance(config.noise_sigmas, config.noise_floor))
