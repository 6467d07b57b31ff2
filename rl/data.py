"""Training data from task suites: a deterministic train / held-out split, a decontamination
report against the suites used for evaluation, and the rows the trainers read.

A row of a GRPO dataset: `prompt`, `task_name`, `task_source`, and optionally `template` (the
reply a completion is placed into, for the CPU smoke run) and `reference_speedup`. A row of an
SFT dataset: `prompt` and `completion` (a verified kernel in a code block).
"""

from __future__ import annotations

import hashlib
import io
import math
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentforge.rl.prompts import KernelHistory, contrastive_prompt, plain_prompt, stored_source

if TYPE_CHECKING:
    from collections.abc import Callable

    from agentforge.rl.reference import RecordedReference
    from agentforge.rl.service import RewardService

    RecordedLookup = Callable[[str], RecordedReference | None]


@dataclass(frozen=True)
class TaskItem:
    name: str  # level1/relu
    source: str
    suite: str

    @property
    def fingerprint(self) -> str:
        """Hash of the source with comments, docstrings' layout and whitespace removed."""
        return hashlib.sha256(" ".join(code_tokens(self.source)).encode()).hexdigest()[:16]


def load_suite(suite: str, tasks_root: Path | None = None) -> list[TaskItem]:
    """Tasks of a suite: `tasks/<suite>/*.py` (e.g. level1), or every task under a folder."""
    from agentforge.task import default_tasks_root, discover, task_name_for

    root = Path(tasks_root) if tasks_root else default_tasks_root()
    folder = Path(suite) if Path(suite).is_dir() else root / suite
    if not folder.is_dir():
        raise FileNotFoundError(f"no suite {suite!r}: {folder} is not a folder")
    files = discover(folder) or sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    return [TaskItem(task_name_for(p), p.read_text(), suite) for p in files]


def split(items: Sequence[TaskItem], held_out_fraction: float = 0.2, seed: int = 0
          ) -> tuple[list[TaskItem], list[TaskItem]]:
    """(train, held_out): items ranked by a hash of (seed, name), the first ceil(f * n) held out.
    Depends only on names and seed, never on file order or the machine."""
    ranked = sorted(items, key=lambda it: hashlib.sha256(f"{seed}:{it.name}".encode()).hexdigest())
    n_held = math.ceil(held_out_fraction * len(ranked)) if held_out_fraction > 0 else 0
    held = {it.name for it in ranked[:n_held]}
    return [it for it in items if it.name not in held], [it for it in items if it.name in held]


# ----- decontamination ----------------------------------------------------------------------
def code_tokens(source: str) -> list[str]:
    """Python tokens without comments, docstrings' position or layout; text fallback."""
    try:
        toks = tokenize.generate_tokens(io.StringIO(source).readline)
        skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                tokenize.ENDMARKER}
        return [t.string for t in toks if t.type not in skip]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return re.findall(r"\w+|[^\w\s]", source)


def shingles(source: str, n: int = 8) -> set[tuple[str, ...]]:
    toks = code_tokens(source)
    return {tuple(toks[i:i + n]) for i in range(max(1, len(toks) - n + 1))}


@dataclass(frozen=True)
class Overlap:
    train: str
    evaluation: str
    eval_suite: str
    reason: str  # same_name | same_source | near_duplicate
    similarity: float


@dataclass
class DecontaminationReport:
    train_count: int
    eval_count: int
    eval_suites: tuple[str, ...]
    threshold: float
    overlaps: list[Overlap] = field(default_factory=list)

    @property
    def contaminated(self) -> set[str]:
        return {o.train for o in self.overlaps}

    @property
    def clean(self) -> bool:
        return not self.overlaps

    def to_dict(self) -> dict[str, Any]:
        return {
            "train_count": self.train_count, "eval_count": self.eval_count,
            "eval_suites": list(self.eval_suites), "threshold": self.threshold, "clean": self.clean,
            "overlaps": [vars(o) for o in self.overlaps],
        }

    def to_markdown(self) -> str:
        lines = [
            f"# Decontamination: {self.train_count} training items vs {self.eval_count} evaluation tasks "
            f"({', '.join(self.eval_suites) or 'none'})",
            "",
            f"Near-duplicate threshold: Jaccard similarity of 8-token shingles >= {self.threshold}.",
            "",
        ]
        if self.clean:
            return "\n".join([*lines, "No overlap found."]) + "\n"
        lines += ["| training item | evaluation task | suite | reason | similarity |", "|---|---|---|---|---|"]
        lines += [f"| {o.train} | {o.evaluation} | {o.eval_suite} | {o.reason} | {o.similarity:.2f} |"
                  for o in self.overlaps]
        return "\n".join(lines) + "\n"


def decontamination_report(train: Iterable[TaskItem], evaluation: Iterable[TaskItem],
                           threshold: float = 0.6) -> DecontaminationReport:
    """Every training item that shares a name, a normalised source, or most of its 8-token
    shingles with an evaluation task."""
    train, evaluation = list(train), list(evaluation)
    eval_shingles = {e.name: shingles(e.source) for e in evaluation}
    report = DecontaminationReport(len(train), len(evaluation), tuple(sorted({e.suite for e in evaluation})),
                                   threshold)
    for item in train:
        mine = shingles(item.source)
        for ev in evaluation:
            theirs = eval_shingles[ev.name]
            sim = len(mine & theirs) / (len(mine | theirs) or 1)
            if item.name.split("/")[-1] == ev.name.split("/")[-1]:
                reason = "same_name"
            elif item.fingerprint == ev.fingerprint:
                reason = "same_source"
            elif sim >= threshold:
                reason = "near_duplicate"
            else:
                continue
            report.overlaps.append(Overlap(item.name, ev.name, ev.suite, reason, sim))
    return report


# ----- rows for the trainers ----------------------------------------------------------------
def grpo_rows(items: Sequence[TaskItem], backend: str = "cuda", history: KernelHistory | None = None,
              examples: int = 3, repeat: int = 1, seed: int = 0) -> list[dict[str, Any]]:
    """One prompt row per task (times `repeat`): plain, or contrastive when a history is given."""
    rows = []
    for item in items:
        if history is not None:
            prompt = contrastive_prompt(item.name, item.source, history.scored_kernels(item.name), examples,
                                        backend, seed)
        else:
            prompt = plain_prompt(item.name, item.source, backend)
        row = {"prompt": prompt.text, "task_name": item.name, "task_source": item.source,
               "prompt_version": prompt.version}
        rows += [dict(row) for _ in range(repeat)]
    return rows


def smoke_rows(repeat: int = 8, tasks: Sequence[str] = ("relu",), reference: RecordedLookup | None = None
               ) -> list[dict[str, Any]]:
    """The CPU smoke problems (rl/tiny.py's pool): a prompt word each; the completion is placed
    into the task's lean C++ skeleton. `reference(task_name)` gives the shipped kernel's recorded
    speedup where one applies (its columns `reference_speedup` and `reference_record`)."""
    from agentforge.rl.tiny import smoke_entry

    rows = []
    for key in tasks:
        entry = smoke_entry(key)
        row = {"prompt": entry.prompt, "task_name": entry.task_name, "task_source": entry.task_path.read_text(),
               "template": entry.skeleton.read_text(), "prompt_version": "smoke",
               "reference_speedup": None, "reference_record": None}
        found = reference(entry.task_name) if reference is not None else None
        if found is not None:
            row["reference_speedup"], row["reference_record"] = found.speedup, found.source
        rows += [dict(row) for _ in range(repeat)]
    return rows


@dataclass(frozen=True)
class VerifiedKernel:
    """A kernel for the SFT warm start; only `verified` ones (accepted by the evaluator) teach."""

    task_name: str
    task_source: str
    source: str
    backend: str
    speedup: float | None
    origin: str  # reference-kernel | agent-run | smoke
    verified: bool = False  # accepted by the evaluator (a stored record, or `verify`)


def reference_kernels(tasks: Sequence[TaskItem], gpu: str | None = None) -> list[VerifiedKernel]:
    """Shipped reference kernels of these tasks. Those whose record says accepted come back
    with `verified = True`; the others must pass `verify` before they teach anything."""
    from agentforge.kernel_library import list_kernels

    by_name = {t.name: t for t in tasks}
    found = []
    for kernel in list_kernels(gpu):
        task = by_name.get(kernel.task_name)
        if task is None:
            continue
        summary = (kernel.record or {}).get("summary", {})
        found.append(VerifiedKernel(task.name, task.source, kernel.source, kernel.backend, summary.get("speedup"),
                                    "reference-kernel", verified=bool(summary.get("accepted"))))
    return found


def verify(kernels: Sequence[VerifiedKernel], service: RewardService) -> list[VerifiedKernel]:
    """Kernels the evaluator accepts now (through the reward service); unverified ones are
    evaluated, rejected ones dropped."""
    from agentforge.rl.service import RewardRequest

    pending = [k for k in kernels if not k.verified]
    requests = [RewardRequest(k.task_name, k.task_source, f"```python\n{k.source}\n```") for k in pending]
    records = service.score_sync(requests) if requests else []
    accepted = [replace(k, speedup=r.speedup, verified=True) for k, r in zip(pending, records, strict=True)
                if r.accepted]
    return [k for k in kernels if k.verified] + accepted


def store_kernels(url: str, tasks: Sequence[TaskItem]) -> list[VerifiedKernel]:
    """Accepted agent-run kernels from the results store (sources kept in candidate_meta)."""
    from agentforge.store.store import ResultsStore

    by_name = {t.name: t for t in tasks}
    found = []
    with ResultsStore(url) as store:
        for ev in store.evaluations():
            task = by_name.get(ev.task)
            source = stored_source(ev.result.candidate_meta) if ev.accepted and task else None
            if task is not None and source:
                found.append(VerifiedKernel(task.name, task.source, source, ev.result.backend, ev.speedup,
                                            "agent-run", verified=True))
    return found


def sft_rows(kernels: Sequence[VerifiedKernel]) -> list[dict[str, Any]]:
    """Prompt-completion rows: the plain prompt, and the verified kernel as the answer."""
    unverified = [k.task_name for k in kernels if not k.verified]
    if unverified:
        raise ValueError(f"unverified kernels would teach unmeasured code: {unverified}; run verify first")
    return [
        {"prompt": plain_prompt(k.task_name, k.task_source, k.backend).text,
         "completion": f"```python\n{k.source.strip()}\n```", "task_name": k.task_name, "origin": k.origin}
        for k in kernels
    ]
