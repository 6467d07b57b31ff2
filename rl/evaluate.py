"""`agentforge rl eval`: score a trained checkpoint beside its base model, with the leaderboard's
runner and metrics.

Each model (a Hugging Face folder: TRL's `final/` or a `checkpoint-N/`, the base policy) is
served in turn by the local OpenAI-compatible server (agentforge/llm/local_server.py) on
loopback and asked, through the OpenAI client, for `samples` replies per task of the suite. A
reply becomes a candidate as in training (placed into the smoke task's template, or its code
extracted; a reply without code goes to the evaluator as it is and fails there), the evaluator
judges it in a sandbox child, the leaderboard's runner stores each result in a results store of
the run's own, and `leaderboard.metrics.summarize` gives the figures: correctness, fast_p, the
geometric mean speedup, the flag rate. Both models see the same prompts and sampling seeds.

The tasks are a training config's own (its training prompts, the smoke problems' templates
included), or any leaderboard suite (tasks:level1, a .toml file, ...) with training's plain
prompt (rl/prompts.py).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentforge.rl.reward_fn import COMPLETION_MARK
from agentforge.rl.service import RewardRequest, ServiceConfig, make_eval_job

from agentforge.candidate import NoCodeError, extract_code
from agentforge.leaderboard.metrics import EntryMetrics, summarize
from agentforge.leaderboard.runner import Executor, PlannedJob, execute, job_key
from agentforge.leaderboard.suites import Suite, SuiteTask


class RLEvalError(ValueError):
    """Settings `rl eval` cannot run with; the message says what to change."""


@dataclass(frozen=True)
class EvalTask:
    task: SuiteTask
    source: str
    prompt: str
    template: str | None = None  # the reply goes at {completion} (the smoke task)


@dataclass(frozen=True)
class Sampling:
    samples: int = 4  # replies per task
    max_tokens: int = 512
    temperature: float = 1.0
    seed: int = 0
    chat: bool = True  # prompts as a chat message (the tokenizer's template applies when it has one)
    context: int | None = None  # serve with at most this context
    threads: int | None = None  # torch threads of the serving process (process-wide)


@dataclass(frozen=True)
class ModelScore:
    label: str  # checkpoint | base
    model: str
    entry: str
    metrics: EntryMetrics
    statuses: dict[str, int]  # verdicts of every sample
    generate_s: float
    tokens_per_s: float | None
    completion_tokens: int


@dataclass
class EvalReport:
    suite: str
    track: str
    sampling: Sampling
    scores: list[ModelScore] = field(default_factory=list)
    out_dir: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite, "track": self.track, "sampling": dataclasses.asdict(self.sampling),
            "models": [{"label": s.label, "model": s.model, "entry": s.entry, "metrics": s.metrics.as_row(),
                        "statuses": s.statuses, "generate_s": round(s.generate_s, 2),
                        "tokens_per_s": s.tokens_per_s, "completion_tokens": s.completion_tokens}
                       for s in self.scores],
        }


def training_tasks(config: Any) -> tuple[Suite, list[EvalTask]]:
    """The tasks a training config trains on, each with the very prompt (and template) of its
    training rows (rl/trl_train.py's prompt_rows)."""
    from agentforge.rl.trl_train import prompt_rows

    tasks: dict[str, EvalTask] = {}
    for row in prompt_rows(config):
        name = str(row["task_name"])
        if name in tasks:
            continue
        prompt = row["prompt"]
        if isinstance(prompt, list):  # chat rows: the user turn
            prompt = "\n".join(str(m.get("content", "")) for m in prompt if m.get("role") == "user")
        task = SuiteTask(name, Path(name + ".py"), None, None)
        tasks[name] = EvalTask(task, str(row["task_source"]), str(prompt), row.get("template"))
    if not tasks:
        raise RLEvalError(f"config {config.name!r} has no training prompts")
    suite = Suite(f"rl-train:{config.name}", tuple(t.task for t in tasks.values()))
    return suite, list(tasks.values())


def suite_tasks(spec: str, backend: str, tasks_root: Path | None = None) -> tuple[Suite, list[EvalTask]]:
    """A leaderboard suite, each task with the plain prompt training uses for suite tasks."""
    from agentforge.rl.prompts import plain_prompt

    from agentforge.leaderboard.suites import SuiteError, load_suite
    from agentforge.task import default_tasks_root

    try:
        loaded = load_suite(spec, tasks_root or default_tasks_root())
    except SuiteError as exc:
        raise RLEvalError(str(exc)) from exc
    items = []
    for t in loaded.tasks:
        source = t.path.read_text()
        items.append(EvalTask(t, source, plain_prompt(t.name, source, backend).text))
    return loaded, items


def candidate_source(reply: str, task: EvalTask) -> str:
    """What the evaluator judges for one reply, as the reward service would build it."""
    text = task.template.replace(COMPLETION_MARK, reply) if task.template is not None else reply
    try:
        return extract_code(text)
    except NoCodeError:
        return text  # judged as it is: the evaluator's static check says what is missing


def sample_replies(model_dir: str | Path, tasks: list[EvalTask], sampling: Sampling
                   ) -> tuple[dict[str, list[str]], Any]:
    """`samples` replies per task from the model served on loopback, and the server's counters."""
    import openai

    from agentforge.llm.local_server import LocalModelServer

    replies: dict[str, list[str]] = {}
    with LocalModelServer(model_dir, context=sampling.context, threads=sampling.threads) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=3600)
        for task in tasks:
            common = {"model": server.name, "max_tokens": sampling.max_tokens, "temperature": sampling.temperature,
                      "n": sampling.samples, "seed": sampling.seed}
            if sampling.chat:
                answer = client.chat.completions.create(messages=[{"role": "user", "content": task.prompt}],
                                                        **common)
                replies[task.task.name] = [c.message.content or "" for c in answer.choices]
            else:
                answer = client.completions.create(prompt=task.prompt, **common)
                replies[task.task.name] = [c.text for c in answer.choices]
        return replies, server.stats


def score_model(label: str, model_dir: str | Path, *, suite: Suite, tasks: list[EvalTask], sampling: Sampling,
                service: ServiceConfig, store: Any, executor: Executor) -> ModelScore:
    """Sample, evaluate through the leaderboard's runner into `store`, and summarise one model."""
    from agentforge.leaderboard.board import outcome

    entry = f"{label}:{Path(model_dir).name}"
    store.ensure_entry(entry, kind="eval", meta={"model": str(model_dir), "label": label})
    replies, stats = sample_replies(model_dir, tasks, sampling)
    planned = []
    for task in tasks:
        for sample, reply in enumerate(replies[task.task.name]):
            source = candidate_source(reply, task)
            key = job_key(entry, suite.name, service.track, task.task.name, sample, source)
            request = RewardRequest(task.task.name, task.source, reply)
            job = make_eval_job(request, source, service)
            job = dataclasses.replace(job, candidate_meta={**job.candidate_meta, "job_key": key, "sample": sample,
                                                           "reply": reply})
            planned.append(PlannedJob(key, task.task, sample, service.track, job))
    execute(planned, store=store, entry=entry, suite=suite, executor=executor)
    rows = store.evaluations(entry=entry, suite=suite.name, track=service.track)
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row.status] = statuses.get(row.status, 0) + 1
    metrics = summarize([outcome(r) for r in rows], suite.task_names)
    return ModelScore(label, str(model_dir), entry, metrics, statuses, stats.generate_s, stats.tokens_per_s,
                      stats.completion_tokens)


def evaluate_checkpoint(
    checkpoint: str | Path, *, base: str | Path | None, suite: Suite, tasks: list[EvalTask], sampling: Sampling,
    service: ServiceConfig, out_dir: Path, executor: Executor | None = None,
    on_model: Callable[[str], None] | None = None,
) -> EvalReport:
    """Score `checkpoint` (and `base`, when given) on `suite`'s `tasks` (training_tasks or
    suite_tasks); the report goes to out_dir/report.json."""
    from agentforge.store import ResultsStore

    if not (Path(checkpoint) / "config.json").is_file():
        raise RLEvalError(f"{checkpoint}: not a Hugging Face model folder (no config.json); "
                          "name a training run's final/ or checkpoint-N/ folder")
    if sampling.samples < 1:
        raise RLEvalError("samples must be at least 1")
    suite_obj = suite
    out_dir.mkdir(parents=True, exist_ok=True)
    executor = executor or default_executor(service)
    report = EvalReport(suite_obj.name, service.track, sampling, out_dir=str(out_dir))
    models = [("checkpoint", checkpoint)] + ([("base", base)] if base is not None else [])
    with ResultsStore(f"sqlite:///{(out_dir / 'results.db').resolve()}") as store:
        for label, model in models:
            if on_model is not None:
                on_model(f"{label}: {model}")
            start = time.perf_counter()
            report.scores.append(score_model(label, model, suite=suite_obj, tasks=tasks, sampling=sampling,
                                             service=service, store=store, executor=executor))
            if on_model is not None:
                on_model(f"{label}: scored in {time.perf_counter() - start:.0f} s")
    (out_dir / "report.json").write_text(json.dumps(report.to_dict(), indent=1, default=str) + "\n")
    return report


def default_executor(service: ServiceConfig) -> Executor:
    """The leaderboard's process pool with the service's sandbox options and concurrency."""
    from agentforge.sandbox.config import SandboxConfig

    from agentforge.leaderboard.executors import make_executor

    sandbox = SandboxConfig(**service.sandbox_options) if service.sandbox_options else SandboxConfig()
    return make_executor("process", sandbox, workers=service.concurrency)


def base_model_dir(config: Any, out_dir: Path) -> str:
    """The policy a training config starts from, as a folder the server can load: the tiny
    in-code model is written (from its seed) under out_dir; a pretrained one is its own path."""
    if not config.model.tiny:
        return str(config.model.name_or_path)
    from agentforge.rl.trl_train import load_policy

    target = out_dir / "base-tiny"
    if not (target / "config.json").is_file():
        model, tokenizer = load_policy(config)
        model.save_pretrained(target)
        tokenizer.save_pretrained(target)
    return str(target)
