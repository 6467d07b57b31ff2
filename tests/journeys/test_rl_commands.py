"""`agentforge rl`: train and sft run one code path, and serve-rewards is registered by the CLI's
root (rl_cmd no longer imports rl_reward_cmd). Run as a user types them."""

from __future__ import annotations

from pathlib import Path

from .user import REPO_ROOT, quote, type_command, user_env


def test_train_and_sft_refuse_a_bad_config_in_one_line(user_dir: Path) -> None:
    env = user_env(user_dir.parent / "home")
    (user_dir / "bad.toml").write_text("[grpo]\nno_such_setting = 1\n")
    for command in ("train", "sft"):
        for config in ("bad.toml", "missing.toml"):
            typed = type_command(f"agentforge rl {command} --config {config} --max-steps 1", user_dir, env, timeout=300)
            assert typed.returncode == 2, typed.explain()
            lines = [line for line in typed.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("config:"), typed.explain()
            assert config in lines[0] or "no_such_setting" in lines[0], typed.explain()


def test_serve_rewards_starts_answers_its_health_check_and_stops_on_sigterm(user_dir: Path) -> None:
    env = user_env(user_dir.parent / "home")
    config = quote(REPO_ROOT / "rl" / "configs" / "cpu-smoke.toml")
    script = (
        f"agentforge rl serve-rewards --config {config} --port 0 > out.txt 2>&1 & pid=$!; "
        "for i in $(seq 240); do grep -q 'reward server on' out.txt && break; sleep 0.5; done; "
        "url=$(grep -o 'http://127.0.0.1:[0-9]*' out.txt | head -1); "
        "curl -s \"$url/health\"; echo; kill -TERM $pid; wait $pid; echo \"exit $?\"; cat out.txt")
    typed = type_command(script, user_dir, env, timeout=300)
    out = typed.stdout
    assert "reward server on http://127.0.0.1:" in out, typed.explain()
    assert "exit 0" in out and "reward server stopped" in out, typed.explain()
    assert out.startswith('{"status": "ok"'), typed.explain()
