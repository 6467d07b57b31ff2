"""The reward service over HTTP: a trainer in another process gets rewards from a server
started by the CLI (real sandboxed evaluations on the CPU backend); bad requests get clear
errors and are never evaluated."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from agentforge.rl.reward_client import RewardClient, RewardServerError
from agentforge.rl.reward_server import RewardServer
from agentforge.rl.rewards import build_rewarder
from agentforge.rl.service import RewardRequest, RewardService, ServiceConfig
from agentforge.rl.tiny import smoke_task, smoke_template
from agentforge.rl.verl_backend import score

GOOD, WRONG, HANG = "v=v>0.0f?v:0.0f;", "v=-v;", "for(volatile int s=1;s;){}"

TRAINER = """
import asyncio, json, sys
from agentforge.rl.reward_client import RewardClient
from agentforge.rl.reward_fn import ServiceReward
from agentforge.rl.service import RewardRequest
from agentforge.rl.tiny import smoke_task, smoke_template

url, good, wrong, hang = sys.argv[1:5]
name, source = smoke_task()
client = RewardClient(url)
reward = ServiceReward(client, num_generations=3, normalize=False)
columns = {"task_name": [name] * 3, "task_source": [source] * 3, "template": [smoke_template()] * 3}
rewards = asyncio.run(reward(prompts=["p"] * 3, completions=[good, wrong, "v = ;"], **columns))
hung = client.score_replies([RewardRequest(name, source, smoke_template().replace("{completion}", hang),
                                           timeout_s=6.0)])[0]
print(json.dumps({"rewards": rewards, "hung": {"status": hung.record.status, "reward": hung.record.reward,
                                               "timed_out": hung.timed_out, "detail": hung.detail}}))
"""


def write_config(path: Path, cache_dir: str) -> Path:
    path.write_text(f"""
name = "reward-server-test"
[model]
name_or_path = "unused-by-the-server"
[service]
backend = "cpu"
device = "cpu"
concurrency = 2
request_timeout_s = 240
cache_path = "{path.parent / 'cache.jsonl'}"
[service.job_options]
shapes = ["default"]
measure = {{ baselines = ["eager"] }}
timing = {{ min_reps = 5, max_reps = 20, time_cap_s = 1.0 }}
[service.sandbox_options]
cache_dir = "{cache_dir}"
timeout_s = 60.0
""")
    return path


@pytest.mark.slow  # two interpreters and four sandboxed evaluations: about 40 s on 2 cores
def test_a_trainer_in_another_process_gets_rewards_from_the_cli_server(build_cache_dir, tmp_path):
    config = write_config(tmp_path / "reward.toml", build_cache_dir)
    agentforge = str(Path(sys.executable).with_name("agentforge"))
    server = subprocess.Popen([agentforge, "rl", "serve-rewards", "--config", str(config), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "COLUMNS": "200"})
    try:
        line = server.stdout.readline()
        assert line.startswith("reward server on http://127.0.0.1:"), line + server.stderr.read()
        url = line.split()[3]
        trainer = subprocess.run([sys.executable, "-c", TRAINER, url, GOOD, WRONG, HANG],
                                 capture_output=True, text=True, timeout=300)
        assert trainer.returncode == 0, trainer.stderr[-3000:]
        out = json.loads(trainer.stdout.splitlines()[-1])
        good, wrong, broken = out["rewards"]
        assert good >= 1.0 and wrong == -1.0 and broken == -1.0
        hung = out["hung"]
        assert hung["status"] == "timeout" and hung["reward"] == -1.0 and hung["timed_out"]
        assert "no verdict within 6 s" in hung["detail"]
        health = RewardClient(url).health()
        assert health["stats"]["evaluations"] == 4 and health["stats"]["timeouts"] == 1
        # verl's score function, pointed at the server: its cache answers at once.
        again = asyncio.run(score.compute_score("agentforge", GOOD, "smoke/relu", {
            "task_source": smoke_task()[1], "template": smoke_template()}, server_url=url))
        assert again["cached"] == 1.0 and again["score"] == good and again["accepted"] == 1.0
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
    assert server.returncode == 0, err[-2000:]
    assert (tmp_path / "cache.jsonl").read_text().count("\n") == 3  # the hung one's timeout is not kept


@pytest.fixture
def server(tmp_path):
    service = RewardService(build_rewarder(), ServiceConfig(sandbox_options={"workdir_root": str(tmp_path)}))
    srv = RewardServer(service).start()
    yield srv
    srv.close()


def post(url: str, body: bytes) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(("body", "status", "message"), [
    (b"{not json", 400, "the body is not JSON"),
    (b'[1, 2]', 400, '{"requests": [...]}'),
    (b'{"requests": []}', 400, "is empty"),
    (b'{"requests": [{"task_name": "t", "task_source": "s"}]}', 400,
     "requests[0].completion must be a string (missing)"),
    (b'{"requests": [{"task_name": "", "task_source": "s", "completion": "c"}]}', 400, "task_name is empty"),
    (b'{"requests": [{"task_name": "t", "task_source": "s", "completion": "c", "timeout_s": -1}]}', 400,
     "requests[0].timeout_s must be a positive number"),
    (b'{"requests": [{"task_name": "t", "task_source": "s", "completion": "c", "reference_speedup": "2x"}]}',
     400, "reference_speedup must be a positive number"),
    (b'{"requests": [{"task_name": "t", "task_source": "s", "completion": "c", "prompt": "p"}]}', 400,
     "unknown fields ['prompt']"),
    (b'{"requests": [{"task_name": "t", "task_source": "s", "completion": "c", "meta": [1]}]}', 400,
     "meta must be an object"),
])
def test_bad_requests_get_clear_errors_and_nothing_is_evaluated(server, body, status, message):
    code, payload = post(server.url + "/score", body)
    assert code == status and message in payload["error"]
    assert server.service.stats.requests == 0 and server.service.stats.evaluations == 0


def test_unknown_endpoints_and_the_client_side_errors(server):
    code, payload = post(server.url + "/rewards", b"{}")
    assert code == 404 and "use POST /score or GET /health" in payload["error"]
    client = RewardClient(server.url)
    with pytest.raises(RewardServerError, match=r"refused POST /score \(400\): .*timeout_s must be a positive"):
        client.score_sync([RewardRequest("t", "s", "c", timeout_s=0.0)])
    assert client.health()["service"]["backend"] == "cpu"
    # A reply without code is answered by the server without an evaluation, as in process.
    record = client.score_sync([RewardRequest("t", "s", "I would tile it.", meta={"i": 7})])[0]
    assert record.status == "no_code" and record.reward == -1.0 and record.meta == {"i": 7}


def test_an_unreachable_server_is_named():
    with pytest.raises(RewardServerError, match=r"cannot reach the reward server at http://127.0.0.1:9"):
        RewardClient("http://127.0.0.1:9", timeout_s=5).health()


def test_the_cli_refuses_a_bad_config_or_a_taken_port(tmp_path):
    import socket

    from typer.testing import CliRunner

    from agentforge.cli import app

    runner = CliRunner()
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\ntiny = true\n[service]\nexecutor = "slurm"\n')
    result = runner.invoke(app, ["rl", "serve-rewards", "--config", str(bad), "--port", "0"])
    assert result.exit_code == 2 and "unknown reward executor 'slurm'" in result.output
    good = tmp_path / "good.toml"
    good.write_text("[model]\ntiny = true\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["rl", "serve-rewards", "--config", str(good), "--port", str(port)])
    assert result.exit_code == 2 and f"cannot listen on 127.0.0.1:{port}" in result.output
