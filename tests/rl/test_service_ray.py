"""The reward service on Ray workers: one local cluster per module, with a custom resource
declared as evaluation nodes declare theirs, real sandboxed evaluations on the CPU backend."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from agentforge.rl.config import load_config
from agentforge.rl.rewards import build_rewarder
from agentforge.rl.service import RayEvaluate, RewardRequest, RewardService
from agentforge.rl.tiny import smoke_task, smoke_template
from agentforge.rl.verl_backend import score

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow  # every test here shares one Ray start (about 10-15 s on 2 cores)

EVAL_RESOURCE = "agentforge_eval"  # what `ray start --resources=...` declares on evaluation nodes
GOOD, WRONG, HANG = "v=v>0.0f?v:0.0f;", "v=-v;", "for(volatile int s=1;s;){}"


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, resources={EVAL_RESOURCE: 2}, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def write_config(path: Path, cache_dir: str, resources: dict[str, float], timeout_s: float = 240) -> Path:
    """No warm spares: a Ray worker starts one after each evaluation, idle until its next, and the
    cancellation test must find the hung evaluation's child alone among the new ones."""
    table = ", ".join(f"{k} = {v}" for k, v in resources.items())
    path.write_text(f"""
name = "verl-reward-test"
[model]
name_or_path = "unused-by-verl"
[service]
backend = "cpu"
device = "cpu"
executor = "ray"
concurrency = 3
request_timeout_s = {timeout_s}
ray_resources = {{ {table} }}
cache_path = "{path.parent / 'cache.jsonl'}"
[service.job_options]
shapes = ["default"]
measure = {{ baselines = ["eager"] }}
timing = {{ min_reps = 5, max_reps = 20, time_cap_s = 1.0 }}
[service.sandbox_options]
cache_dir = "{cache_dir}"
timeout_s = 120.0
warm_spares = 0
""")
    return path


def sandbox_children() -> set[int]:
    """Sandbox children below this test process (Ray's raylet and its workers are its children)."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])

    def below_us(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == os.getpid():
                return True
        return False

    return {pid for pid, cmd in commands.items() if "agentforge.sandbox.child" in cmd and below_us(pid)}


def describe(pids: set[int]) -> str:
    """State, parent and the parent's command of each process, for a failure message."""
    lines = []
    for pid in sorted(pids):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            parent = int(stat[1])
            command = Path(f"/proc/{parent}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            lines.append(f"pid {pid} state {stat[0]}, parent {parent} ({command[:120]})")
        except OSError:
            lines.append(f"pid {pid} gone")
    return "; ".join(lines)


async def wait_for(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.2)
    return predicate()


# Three sandbox children on Ray workers, one of them hung and cancelled: about 35 s on 2 cores.
def test_verl_reward_path_on_ray_with_an_eval_resource_and_cancellation(local_ray, build_cache_dir, tmp_path):
    config = write_config(tmp_path / "reward.toml", build_cache_dir, {EVAL_RESOURCE: 1})
    name, source = smoke_task()
    extra = {"task_source": source, "template": smoke_template()}
    service = score.service_for(str(config))
    assert isinstance(service._evaluate, RayEvaluate) and service._evaluate.resources == {EVAL_RESOURCE: 1}

    async def main():
        good, wrong = await asyncio.gather(*(score.compute_score("agentforge", body, name, extra,
                                                                 config_path=str(config))
                                             for body in (GOOD, WRONG)))
        # A hung kernel: a request with a short deadline; its Ray task must be stopped.
        # Children left by earlier tests in this process (a local evaluation that cannot be cancelled
        # lives to its own limit) are not this evaluation's: only new ones count.
        before = sandbox_children()
        reply = smoke_template().replace("{completion}", HANG)
        hung = asyncio.ensure_future(service.score_one(RewardRequest(name, source, reply, timeout_s=20.0)))
        assert await wait_for(lambda: sandbox_children() - before, 30), "the hung evaluation never started a child"
        children = sandbox_children() - before
        # Ray's view of its resources lags under load: the request's 20 s leave it time to show
        held = await wait_for(lambda: ray.available_resources().get(EVAL_RESOURCE, 0.0) == 1.0, 15)
        record = await hung
        # the cancel interrupts the task, and kills its worker after a grace of 5 s; the child's
        # own limit (120 s) is far off, so a child gone within 30 s went because of the cancel
        gone = await wait_for(lambda: not (sandbox_children() & children), 30)
        if not gone:
            gone = describe(sandbox_children() & children)
        freed = await wait_for(lambda: ray.available_resources().get(EVAL_RESOURCE, 0.0) == 2.0, 15)
        return good, wrong, record, held, gone, freed

    good, wrong, hung, held, gone, freed = asyncio.run(main())
    assert good["accepted"] == 1.0 and good["score"] >= 1.0 and good["cached"] == 0.0
    assert wrong["score"] == -1.0 and wrong["compiled"] == 1.0 and wrong["accepted"] == 0.0
    assert hung.status == "timeout" and hung.reward == -1.0
    assert held  # the hung task held one unit of the evaluation resource
    assert service.stats.cancelled == 1
    assert gone is True, f"the cancelled evaluation's sandbox child is still alive 30 s on: {gone}"
    assert freed
    # The verdicts went to the shared cache file: another reward worker's service serves them.
    cfg = load_config(config)
    other = RewardService(build_rewarder(cfg.reward), cfg.service)
    again = asyncio.run(score.score_with(other, GOOD, name, extra))
    assert again["cached"] == 1.0 and again["score"] == good["score"]


def test_an_evaluation_waits_for_its_resource_and_is_cancelled(local_ray, build_cache_dir, tmp_path):
    # No node declares this resource: the task can never be placed (training GPUs are not taken).
    config = write_config(tmp_path / "reward.toml", build_cache_dir, {"agentforge_eval_absent": 1}, timeout_s=3)
    name, source = smoke_task()
    service = score.service_for(str(config))
    started = time.monotonic()
    out = asyncio.run(score.compute_score("agentforge", GOOD, name,
                                          {"task_source": source, "template": smoke_template()},
                                          config_path=str(config)))
    assert out["score"] == -1.0 and out["accepted"] == 0.0
    assert time.monotonic() - started < 20
    assert service.stats.timeouts == 1 and service.stats.cancelled == 1


def test_preflight_finds_the_evaluation_resource_or_names_the_missing_ray_start(local_ray, build_cache_dir, tmp_path):
    import subprocess
    import sys

    from agentforge.rl.verl_backend.preflight import problems

    present = load_config(write_config(tmp_path / "ok.toml", build_cache_dir, {EVAL_RESOURCE: 1})).service
    assert problems(present, ray.cluster_resources()) == []
    assert "training asks for 8 Ray GPUs" in problems(present, ray.cluster_resources(), training_gpus=8)[0]
    absent = write_config(tmp_path / "absent.toml", build_cache_dir, {"agentforge_eval_gpu": 1})
    run = subprocess.run([sys.executable, "-m", "agentforge.rl.verl_backend.preflight", "--config", str(absent),
                          "--address", ray.get_runtime_context().gcs_address],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    assert "no node offers 1 of the evaluation resource 'agentforge_eval_gpu'" in run.stderr
    assert "--num-gpus=0 --resources='{\"agentforge_eval_gpu\": <its GPU count>}'" in run.stderr
