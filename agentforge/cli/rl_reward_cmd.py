"""`agentforge rl serve-rewards`: the reward service over HTTP for trainers in other processes.

Registered by the CLI's root after `rl_cmd` (this module imports `rl_cmd`, never the reverse)."""

from __future__ import annotations

import signal
from pathlib import Path

import typer

from agentforge.cli.common import console, err_console
from agentforge.cli.rl_cmd import CONFIG_HELP, rl_app


def register(app: typer.Typer) -> None:
    """Add `serve-rewards` under `agentforge rl` (`app` is the root; the command lives in `rl_app`)."""
    rl_app.command("serve-rewards")(serve_rewards)


def serve_rewards(
    config: Path = typer.Option(..., "--config", "-c", help=CONFIG_HELP + " Only [reward] and [service] are used."),
    host: str = typer.Option("127.0.0.1", help="Address to bind; the server has no authentication, "
                                               "so keep it on loopback or a private network."),
    port: int = typer.Option(8790, help="Port to listen on (0: any free one, printed)."),
) -> None:
    """Serve the evaluator's rewards over HTTP to trainers in other processes (docs/rl.md).

    POST /score and GET /health; one cache, one concurrency limit and the same timeouts for
    every trainer that calls.
    """
    from agentforge.rl.config import RLConfigError, load_config
    from agentforge.rl.reward_server import RewardServer
    from agentforge.rl.rewards import build_rewarder
    from agentforge.rl.service import RewardService

    try:
        cfg = load_config(config)
    except RLConfigError as exc:
        err_console.print(f"[red]config:[/red] {exc}")
        raise typer.Exit(2) from exc
    try:
        server = RewardServer(RewardService(build_rewarder(cfg.reward), cfg.service), host, port)
    except OSError as exc:
        err_console.print(f"[red]cannot listen on {host}:{port}:[/red] {exc}")
        raise typer.Exit(2) from exc
    signal.signal(signal.SIGTERM, _stop)
    svc = cfg.service
    console.print(f"reward server on {server.url} ({svc.backend} on {svc.device}, executor {svc.executor}, "
                  f"{svc.concurrency} at once, timeout {svc.request_timeout_s:g} s)", soft_wrap=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        console.print(f"reward server stopped: {server.service.stats}", soft_wrap=True)


def _stop(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the server as Ctrl-C does: closed, stats printed
