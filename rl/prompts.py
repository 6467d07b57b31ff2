"""Prompts for RL: plain, contrastive (CUDA-L1) and multi-turn (Kevin).

Templates are files under `rl/prompts/`, rendered by one pure function; each rendered prompt
carries its template's version (a hash of the text) for the candidate's provenance.

* Contrastive: earlier kernels of the task with their measured speedups, drawn from different
  score buckets (rejected, slower than eager, on par, faster, much faster), so the model sees
  what separates good from bad; it must analyse, then design, then write code.
* Multi-turn: the previous kernels with the evaluator's one-line verdicts, never the model's
  earlier reasoning (Kevin replaced it with summaries to keep contexts short and honest).
"""

from __future__ import annotations

import hashlib
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

TEMPLATES = Path(__file__).resolve().parent / "prompts"

# Upper bounds of the score buckets (speedup vs eager); rejected kernels form their own bucket.
BUCKET_EDGES = (0.9, 1.1, 2.0)
BUCKET_NAMES = ("rejected", "slower", "on par", "faster", "much faster")


@dataclass(frozen=True)
class ScoredKernel:
    """An earlier kernel of a task and what the evaluator said of it."""

    source: str
    speedup: float | None  # eager / candidate; None when not accepted
    status: str  # an evaluator Status value
    summary: str = ""  # EvalResult.summary(), for multi-turn prompts

    @property
    def accepted(self) -> bool:
        return self.status == "ok" and self.speedup is not None


class KernelHistory(Protocol):
    """Where scored kernels of a task come from (the results store, or memory in tests)."""

    def scored_kernels(self, task_name: str) -> list[ScoredKernel]: ...


@dataclass(frozen=True)
class InMemoryHistory:
    kernels: dict[str, list[ScoredKernel]]

    def scored_kernels(self, task_name: str) -> list[ScoredKernel]:
        return list(self.kernels.get(task_name, []))


class StoreHistory:
    """Scored kernels from the results store (`agentforge.store`). The store keeps verdicts, not
    sources: a kernel's source comes from its result's candidate metadata (`source`, or the
    `file` the leaderboard evaluated), and kernels whose source is gone are skipped."""

    def __init__(self, url: str) -> None:
        from agentforge.store.store import ResultsStore

        self._store = ResultsStore(url)

    def scored_kernels(self, task_name: str) -> list[ScoredKernel]:
        found = []
        for ev in self._store.evaluations():
            if ev.task != task_name:
                continue
            result = ev.result
            source = stored_source(result.candidate_meta)
            if source:
                found.append(ScoredKernel(source=source, speedup=ev.speedup, status=ev.status,
                                          summary=result.summary()))
        return found


def stored_source(candidate_meta: dict[str, Any]) -> str | None:
    """A stored evaluation's kernel source: kept inline, or the file it was read from."""
    if candidate_meta.get("source"):
        return str(candidate_meta["source"])
    path = Path(str(candidate_meta.get("file", "")))
    if candidate_meta.get("file") and path.is_file():
        return path.read_text()
    return None


@dataclass(frozen=True)
class Prompt:
    text: str
    template: str
    version: str  # hash of the template files used


def template_text(name: str) -> str:
    return (TEMPLATES / f"{name}.md").read_text()


def template_version(*names: str) -> str:
    digest = hashlib.sha256("".join(template_text(n) for n in names).encode()).hexdigest()
    return digest[:12]


def render(name: str, **values: str) -> str:
    """Fill a template's `{placeholders}`; a missing or unused value is an error."""
    text = template_text(name)
    wanted = {field for _, field, _, _ in string.Formatter().parse(text) if field}
    if wanted != set(values):
        raise KeyError(f"template {name} takes {sorted(wanted)}, got {sorted(values)}")
    return text.format(**values)


def bucket_of(kernel: ScoredKernel) -> int:
    if not kernel.accepted:
        return 0
    assert kernel.speedup is not None
    return 1 + sum(kernel.speedup >= edge for edge in BUCKET_EDGES)


def pick_contrastive(kernels: Sequence[ScoredKernel], k: int = 3, seed: int = 0) -> list[ScoredKernel]:
    """Up to `k` kernels from distinct score buckets (best buckets first), then fill from the
    rest; shown best first. Deterministic for a seed."""
    rng = random.Random(seed)
    by_bucket: dict[int, list[ScoredKernel]] = {}
    for kernel in kernels:
        by_bucket.setdefault(bucket_of(kernel), []).append(kernel)
    chosen: list[ScoredKernel] = []
    for bucket in sorted(by_bucket, reverse=True):
        if len(chosen) < k:
            chosen.append(rng.choice(by_bucket[bucket]))
    rest = [kr for kr in kernels if kr not in chosen]
    rng.shuffle(rest)
    chosen += rest[: max(0, k - len(chosen))]
    return sorted(chosen, key=lambda kr: (kr.speedup if kr.accepted else -1.0), reverse=True)


def verdict(kernel: ScoredKernel) -> str:
    if not kernel.accepted:
        return f"rejected ({kernel.status})"
    return f"{kernel.speedup:.2f}x vs eager ({BUCKET_NAMES[bucket_of(kernel)]})"


def plain_prompt(task_name: str, task_source: str, backend: str = "cuda") -> Prompt:
    text = render("plain", task_name=task_name, task_source=task_source.strip(), backend=backend.upper())
    return Prompt(text, "plain", template_version("plain"))


def contrastive_prompt(task_name: str, task_source: str, kernels: Sequence[ScoredKernel], k: int = 3,
                       backend: str = "cuda", seed: int = 0) -> Prompt:
    """CUDA-L1's contrastive prompt; falls back to the plain one when no kernel is known."""
    chosen = pick_contrastive(kernels, k, seed)
    if not chosen:
        return plain_prompt(task_name, task_source, backend)
    examples = "\n".join(
        render("contrastive_example", label=chr(ord("A") + i), verdict=verdict(kr), source=kr.source.strip())
        for i, kr in enumerate(chosen)
    )
    text = render("contrastive", task_name=task_name, task_source=task_source.strip(),
                  examples=examples.strip(), backend=backend.upper())
    return Prompt(text, "contrastive", template_version("contrastive", "contrastive_example"))


def multi_turn_prompt(task_name: str, task_source: str, turns: Sequence[ScoredKernel],
                      backend: str = "cuda") -> Prompt:
    """The next turn's prompt: earlier kernels and their verdict summaries, no reasoning."""
    rendered = "\n".join(
        render("multi_turn_turn", turn=str(i + 1), source=t.source.strip(), summary=t.summary or verdict(t))
        for i, t in enumerate(turns)
    )
    text = render("multi_turn", task_name=task_name, task_source=task_source.strip(),
                  turns=rendered.strip(), backend=backend.upper())
    return Prompt(text, "multi_turn", template_version("multi_turn", "multi_turn_turn"))
