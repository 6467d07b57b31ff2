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


@rl_app.command("train")
def train(
    config: Path = typer.Option(..., "--config", "-c", help=CONFIG_HELP),
    max_steps: int | None = typer.Option(None, help="Stop after this many optimizer steps."),
    output_dir: str | None = typer.Option(None, help="Override [output] dir."),
) -> None:
    """GRPO with TRL, rewarded by the hardened evaluator through the reward service."""
    cfg = _load(config, output_dir)
    from agentforge.rl.config import RLConfigError
    from agentforge.rl.trl_train import train_grpo

    try:
        outcome = train_grpo(cfg, max_steps=max_steps)
    except RLConfigError as exc:
        err_console.print(f"[red]config:[/red] {exc}")
        raise typer.Exit(2) from exc
    _report(outcome)


@rl_app.command("sft")
def sft(
    config: Path = typer.Option(..., "--config", "-c", help=CONFIG_HELP),
    max_steps: int | None = typer.Option(None, help="Stop after this many optimizer steps."),
    output_dir: str | None = typer.Option(None, help="Override [output] dir."),
) -> None:
    """Warm start with TRL's SFT trainer on verified kernels (reference kernels, accepted runs)."""
    cfg = _load(config, output_dir)
    from agentforge.rl.config import RLConfigError
    from agentforge.rl.trl_train import train_sft

    try:
        outcome = train_sft(cfg, max_steps=max_steps)
    except RLConfigError as exc:
        err_console.print(f"[red]config:[/red] {exc}")
        raise typer.Exit(2) from exc
    _report(outcome)


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
    from agentforge.cli import rl_reward_cmd  # noqa: F401 - adds `rl serve-rewards` to rl_app
    app.add_typer(rl_app, name="rl")
