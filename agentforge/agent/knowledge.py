"""What the coder reads beyond the task: technique notes chosen for the task, and scored kernels of
similar tasks from the results store, each within a token budget.

* Notes (`agent/skills/*.md`): short, reviewed notes per operation class and backend. A note is
  chosen when its backend matches and its tags meet the task's (its `TAGS`, or words of the
  reference such as `conv2d` or `layer_norm`), and ranked up when its roofline class is the task's
  (its tags, or the roofline label of the kernel being edited).
* Exemplars: the store's accepted kernels of the same backend for the same task or tasks sharing
  its tags, shown contrastively: the fastest one and a slower one, with their measured speedups,
  as the RL's contrastive prompts do.

`Knowledge.for_run` returns None when both are switched off; a call returns the text for the
coder's system prompt and what it used (note names, exemplar hashes), which each round records.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SKILLS_DIR = Path(__file__).resolve().parent / "skills"
NOTES_TOKENS = 900  # the notes' share of the prompt, in tokens (about 4 characters each)
EXEMPLAR_TOKENS = 1500

# Words of a reference that name its operation class, for tasks without TAGS (KernelBench's).
_CLASS_WORDS = {
    "gemm": r"matmul|\bmm\(|bmm|nn\.Linear|F\.linear|addmm|einsum|@",
    "conv": r"conv[123]d|Conv[123]d|conv_transpose|ConvTranspose",
    "attention": r"scaled_dot_product_attention|softmax\(.*@|attention",
    "norm": r"layer_norm|LayerNorm|rms_norm|RMSNorm|group_norm|GroupNorm|batch_norm|BatchNorm|InstanceNorm",
    "reduction": r"\.sum\(|\.mean\(|\.amax\(|\.max\(|argmax|cumsum|logsumexp|softmax|torch\.sum|torch\.mean",
    "elementwise": r"relu|gelu|silu|sigmoid|tanh|torch\.exp|clamp|hardswish|leaky_relu|\belu|"
                   r"torch\.add|torch\.mul|\.add\(|\.mul\(",
}


@dataclass(frozen=True)
class Note:
    name: str
    backends: tuple[str, ...]
    tags: frozenset[str]
    classes: frozenset[str]  # roofline classes it is about: memory-bound, compute-bound
    text: str

    @property
    def tokens(self) -> int:
        return len(self.text) // 4 + 1


def load_notes(folder: Path = SKILLS_DIR) -> list[Note]:
    """Every note: a `---` header of `backends:`, `tags:`, `classes:` lines, then its text."""
    notes = []
    for path in sorted(folder.glob("*.md")):
        head, _, body = path.read_text().partition("\n---\n")
        fields = dict(line.split(":", 1) for line in head.strip().strip("-").strip().splitlines() if ":" in line)

        def words(key: str, fields: dict[str, str] = fields) -> tuple[str, ...]:
            return tuple(w.strip() for w in fields.get(key, "").split(",") if w.strip())

        notes.append(Note(path.stem, words("backends"), frozenset(words("tags")), frozenset(words("classes")),
                          body.strip()))
    return notes


def task_tags(source: str) -> set[str]:
    """The task's declared TAGS, and the operation classes its reference's words name."""
    tags: set[str] = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:
        tree = None
    for node in tree.body if tree else []:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "TAGS" for t in node.targets):
            try:
                tags |= {str(t).lower() for t in ast.literal_eval(node.value)}
            except ValueError:
                pass
    model = source.split("class Model", 1)[-1]
    for tag, pattern in _CLASS_WORDS.items():
        if re.search(pattern, model):
            tags.add(tag)
    return tags


def select_notes(notes: Sequence[Note], backend: str, tags: set[str], roofline: str | None,
                 budget_tokens: int = NOTES_TOKENS) -> list[Note]:
    """The notes of this backend that meet the task's tags, best match first, within the budget."""
    scored = []
    for note in notes:
        if backend not in note.backends:
            continue
        overlap = len(note.tags & tags)
        if not overlap:
            continue
        scored.append((overlap + (2 if roofline and roofline in note.classes else 0), note.name, note))
    chosen, used = [], 0
    for _, _, note in sorted(scored, key=lambda s: (-s[0], s[1])):
        if used + note.tokens <= budget_tokens:
            chosen.append(note)
            used += note.tokens
    return chosen


@dataclass(frozen=True)
class Exemplar:
    task: str
    code_hash: str
    speedup: float
    source: str

    @property
    def tokens(self) -> int:
        return len(self.source) // 4 + 1


def pick_exemplars(found: Sequence[tuple[float, Exemplar]], budget_tokens: int = EXEMPLAR_TOKENS) -> list[Exemplar]:
    """A contrastive pair from (similarity, exemplar): the fastest of the most similar tasks, and
    the slowest other accepted kernel, when both fit the budget (else the fastest alone)."""
    fitting = [(s, e) for s, e in found if e.tokens <= budget_tokens]
    if not fitting:
        return []
    top = max(s for s, _ in fitting)
    near = sorted((e for s, e in fitting if s == top), key=lambda e: -e.speedup)
    fast = near[0]
    others = sorted((e for _, e in fitting if e.code_hash != fast.code_hash and e.speedup < fast.speedup),
                    key=lambda e: e.speedup)
    slow = next((e for e in others if fast.tokens + e.tokens <= budget_tokens), None)
    return [fast, slow] if slow else [fast]


def store_exemplars(url: str, task_name: str, backend: str, tags: set[str],
                    tasks_root: Path | None) -> list[tuple[float, Exemplar]]:
    """(similarity, exemplar) for the store's accepted kernels of `backend` on the same task
    (similarity 1 + ...) or tasks sharing tags (their Jaccard). A SQLite store that does not
    exist is not created; no store means no exemplars."""
    from sqlalchemy.engine import make_url

    from agentforge.rl.prompts import stored_source
    from agentforge.store.store import ResultsStore
    from agentforge.task import TaskLoadError, read_task

    parsed = make_url(url)
    if parsed.drivername.startswith("sqlite") and parsed.database and not Path(parsed.database).is_file():
        return []
    store = ResultsStore(url)
    try:
        rows = [ev for ev in store.evaluations() if ev.accepted and ev.speedup]
    finally:
        store.close()
    tag_cache: dict[str, set[str]] = {task_name: tags}
    found: dict[str, tuple[float, Exemplar]] = {}
    for ev in rows:
        result = ev.result
        source = stored_source(result.candidate_meta)
        if result.backend != backend or not source:
            continue
        if ev.task not in tag_cache:
            try:
                tag_cache[ev.task] = task_tags(read_task(ev.task, tasks_root).source)
            except (TaskLoadError, OSError):
                tag_cache[ev.task] = set()
        other = tag_cache[ev.task]
        similarity = 2.0 if ev.task == task_name else len(tags & other) / max(1, len(tags | other))
        if similarity <= 0:
            continue
        exemplar = Exemplar(ev.task, ev.code_hash, float(ev.speedup), source.strip())  # type: ignore[arg-type]
        if ev.code_hash not in found or found[ev.code_hash][1].speedup < exemplar.speedup:
            found[ev.code_hash] = (similarity, exemplar)
    return list(found.values())


@dataclass
class Knowledge:
    """The coder's extra reading for one run; called with the state of the coder call."""

    backend: str
    tags: set[str]
    notes: list[Note] = field(default_factory=list)  # empty: notes switched off
    exemplars: list[Exemplar] = field(default_factory=list)
    exemplar_note: str | None = None  # why there are none, when they were asked for

    @classmethod
    def for_run(cls, task: Any, backend: str, settings: Any, *, skills: bool = True,
                exemplars: bool = True) -> Knowledge | None:
        if not skills and not exemplars:
            return None
        tags = task_tags(task.source)
        knowledge = cls(backend, tags, notes=load_notes() if skills else [])
        if exemplars:
            from agentforge.store.store import StoreError

            root = Path(settings.tasks_root).expanduser() if settings.tasks_root else None
            try:
                knowledge.exemplars = pick_exemplars(store_exemplars(settings.results_url, task.name, backend, tags,
                                                                     root))
            except StoreError as exc:
                knowledge.exemplar_note = f"results store unavailable: {exc}"
            if not knowledge.exemplars and knowledge.exemplar_note is None:
                knowledge.exemplar_note = "no accepted kernel of a similar task in the results store"
        return knowledge

    def __call__(self, state: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        roofline = _roofline_class(state.get("base"), self.tags)
        chosen = select_notes(self.notes, self.backend, self.tags, roofline)
        parts = []
        if chosen:
            parts.append("## Technique notes (chosen for this task)\n\n" + "\n\n".join(n.text for n in chosen))
        if self.exemplars:
            parts.append(_render_exemplars(self.exemplars))
        used: dict[str, Any] = {"notes": [n.name for n in chosen],
                                "exemplars": [{"task": e.task, "code": e.code_hash, "speedup": round(e.speedup, 3)}
                                              for e in self.exemplars]}
        if self.exemplar_note:
            used["exemplar_note"] = self.exemplar_note
        return "\n\n".join(parts), used


def _roofline_class(base: Mapping[str, Any] | None, tags: set[str]) -> str | None:
    for cls in ("memory-bound", "compute-bound"):
        if cls in tags:
            return cls
    return None if not base else base.get("roofline_label")


def _render_exemplars(exemplars: Sequence[Exemplar]) -> str:
    lines = ["## Scored kernels of similar tasks (from the results store, measured by this evaluator)", "",
             "Learn from what separates the faster from the slower; do not copy a kernel written for another "
             "task's shapes."]
    for label, e in zip("AB", exemplars, strict=False):
        lines += ["", f"### Kernel {label}: task {e.task}, {e.speedup:.2f}x vs eager", "```python", e.source, "```"]
    return "\n".join(lines)
