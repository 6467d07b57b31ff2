"""Suites: which tasks an entry is ranked on, and the secret hold-out of ranked runs.

A suite spec is one of:

- `tasks` or `tasks:level1,level2`, or a bare `level1`: the levels of the project's `tasks/`;
- `kernelbench:PATH` or `kernelbench:PATH:level1,level2`: a KernelBench checkout (its
  `KernelBench/level1..4` folders, or PATH itself if it holds the level folders);
- a path to a `.toml` file listing tasks:

      name = "mini"                  # default: the file's stem
      root = "../tasks"              # where task refs resolve, relative to the file (default tasks/)
      tasks = ["level1/19_ReLU", "level2/gemm_bias_relu.py", "/abs/path/to/task.py"]

The hold-out (secret seeds and shapes of a ranked run) lives in a separate TOML file named in
configuration (`--holdout FILE`), kept outside anything a candidate can read:

      seed = 912837                  # base seed of the correctness trials
      [shapes."level1/19_ReLU"]      # extra shape variants, named secret_* in results
      secret_a = { batch_size = 17, dim = 4099 }

It is applied to the jobs only (never to the task files, prompts or the results store).
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentforge.evaluator.result import CorrectnessRecord, EvalJob, EvalResult
from agentforge.task import discover, resolve_task_path, task_name_for

_PROBLEM_ID = re.compile(r"^(\d+)_")
REDACTED_SEED = -1


class SuiteError(ValueError):
    """A suite spec or file that cannot be read; the message says what to fix."""


@dataclass(frozen=True)
class SuiteTask:
    name: str  # "level1/19_ReLU": the key in the store and in reports
    path: Path
    level: int | None
    problem_id: int | None  # KernelBench's number, from a "19_" file-name prefix

    @property
    def stem(self) -> str:
        return self.path.stem


@dataclass(frozen=True)
class Suite:
    name: str
    tasks: tuple[SuiteTask, ...]

    @property
    def task_names(self) -> list[str]:
        return [t.name for t in self.tasks]

    def find(self, level: int | None, problem: str) -> SuiteTask | None:
        """The task for a kernel folder's (level, problem): a problem id, a file stem or a name."""
        for t in self.tasks:
            if level is not None and t.level is not None and t.level != level:
                continue
            if problem in (t.name, t.stem) or (problem.isdigit() and t.problem_id == int(problem)):
                return t
        return None


def load_suite(spec: str, tasks_root: Path) -> Suite:
    """The suite named by `spec` (see the module docstring)."""
    if spec.endswith(".toml"):
        return _from_toml(Path(spec), tasks_root)
    if spec.startswith("kernelbench:"):
        rest = spec[len("kernelbench:"):]
        path, levels = _split_levels(rest)
        root = Path(path).expanduser()
        if (root / "KernelBench").is_dir():
            root = root / "KernelBench"
        if not root.is_dir():
            raise SuiteError(f"suite {spec!r}: {root} is not a KernelBench checkout")
        return _from_levels(f"kernelbench:{','.join(levels) or 'all'}", root, levels)
    if spec == "tasks" or spec.startswith("tasks:"):
        _, levels = _split_levels(spec)
        return _from_levels(spec if levels else "tasks", tasks_root, levels)
    if re.fullmatch(r"level\d+(,level\d+)*", spec):
        return _from_levels(f"tasks:{spec}", tasks_root, spec.split(","))
    raise SuiteError(
        f"unknown suite {spec!r}; use tasks, tasks:level1, level1, kernelbench:PATH[:level1], or a .toml file"
    )


def _split_levels(spec: str) -> tuple[str, list[str]]:
    head, sep, tail = spec.rpartition(":")
    if sep and re.fullmatch(r"level\d+(,level\d+)*", tail):
        return head, tail.split(",")
    return spec, []


def _from_levels(name: str, root: Path, levels: list[str]) -> Suite:
    files = [p for p in discover(root) if not levels or p.parent.name in levels]
    if not files:
        raise SuiteError(f"suite {name!r}: no task files under {root} (levels: {levels or 'all'})")
    return Suite(name=name, tasks=tuple(_suite_task(p) for p in files))


def _from_toml(path: Path, tasks_root: Path) -> Suite:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SuiteError(f"suite file {path}: {exc}") from exc
    refs = data.get("tasks")
    if not isinstance(refs, list) or not refs:
        raise SuiteError(f"suite file {path}: needs a non-empty `tasks = [...]` list")
    root = (path.parent / data["root"]).resolve() if "root" in data else tasks_root
    tasks = []
    for ref in refs:
        try:
            tasks.append(_suite_task(resolve_task_path(str(ref), root)))
        except Exception as exc:  # TaskLoadError: say which entry of the file
            raise SuiteError(f"suite file {path}: task {ref!r}: {exc}") from exc
    return Suite(name=str(data.get("name", path.stem)), tasks=tuple(tasks))


def _suite_task(path: Path) -> SuiteTask:
    level_dir = path.parent.name
    level = int(level_dir[5:]) if level_dir.startswith("level") and level_dir[5:].isdigit() else None
    match = _PROBLEM_ID.match(path.name)
    return SuiteTask(task_name_for(path), path, level, int(match.group(1)) if match else None)


# ----- the secret hold-out ------------------------------------------------------------------
@dataclass(frozen=True)
class Holdout:
    """Secret seed and shapes of a ranked run, applied to evaluation jobs only."""

    seed: int | None = None
    shapes: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.seed is not None or bool(self.shapes)

    def apply(self, job: EvalJob) -> EvalJob:
        """The job with the secret seed and the task's secret shape variants added."""
        changes: dict[str, Any] = {}
        if self.seed is not None:
            changes["correctness"] = dataclasses.replace(job.correctness, base_seed=self.seed)
        extra = self.shapes.get(job.task_name)
        if extra:
            variants = {_secret_name(k): dict(v) for k, v in extra.items()}
            changes["task_source"] = (
                job.task_source + "\n\n# hold-out shape variants of a ranked run\n"
                f"SHAPES = {{**globals().get('SHAPES', {{}}), **{variants!r}}}\n"
            )
            if job.shapes:  # an explicit list: add the secret variants to it
                changes["shapes"] = (*job.shapes, *variants)
        return dataclasses.replace(job, **changes) if changes else job

    def redact(self, result: EvalResult) -> EvalResult:
        """The result with the secret seed removed, so storing or showing it leaks nothing."""
        if self.seed is None:
            return result
        records = tuple(_redact_record(r) for r in result.correctness)
        settings = {k: v for k, v in result.provenance.track_settings.items() if "seed" not in k}
        provenance = dataclasses.replace(result.provenance, track_settings=settings)
        return dataclasses.replace(result, correctness=records, provenance=provenance)


def _secret_name(name: str) -> str:
    return name if name.startswith("secret") else f"secret_{name}"


def _redact_record(record: CorrectnessRecord) -> CorrectnessRecord:
    return dataclasses.replace(record, seed=REDACTED_SEED)


def load_holdout(path: Path | None) -> Holdout:
    """The hold-out from its TOML file; an empty one without a file."""
    if path is None:
        return Holdout()
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise SuiteError(f"hold-out file {path}: {exc}") from exc
    unknown = set(data) - {"seed", "shapes"}
    if unknown:
        raise SuiteError(f"hold-out file {path}: unknown keys {sorted(unknown)}; use seed and shapes")
    seed = data.get("seed")
    if seed is not None and not isinstance(seed, int):
        raise SuiteError(f"hold-out file {path}: seed must be an integer")
    shapes = data.get("shapes", {})
    for task, variants in shapes.items():
        if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
            raise SuiteError(f"hold-out file {path}: shapes.{task!r} must map variant names to size tables")
    return Holdout(seed=seed, shapes=shapes)
