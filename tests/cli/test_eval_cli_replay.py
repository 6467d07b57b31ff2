"""Seeds are fresh and secret per evaluation, and a recorded verdict can be replayed: the real CLI,
the real sandbox, a real lean C++ kernel. Two plain runs draw different seeds; `--replay` of the
first reproduces its seeds and its errors exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "exploits"
TASK = ROOT / "tasks" / "row_softmax.py"
KERNEL = ROOT / "honest" / "softmax_cpp.py"


def eval_json(tmp_path: Path, *extra: str) -> dict:
    env = {**os.environ, "AGENTFORGE_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "agentforge", "eval", str(TASK), str(KERNEL), "--backend", "cpu",
                           "--device", "cpu", "--no-timing", "--json", *extra],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def seeds_and_errors(result: dict) -> list[tuple]:
    return [(r["shape"], r["seed"], r["max_abs_err"], r["max_rel_err"]) for r in result["correctness"]]


def test_replay_reproduces_a_verdict_and_fresh_runs_differ(tmp_path: Path) -> None:
    first = eval_json(tmp_path)
    assert first["status"] == "ok", first.get("error")
    second = eval_json(tmp_path)
    seed = first["provenance"]["track_settings"]["correctness"]["base_seed"]
    assert seed != second["provenance"]["track_settings"]["correctness"]["base_seed"]
    recorded = tmp_path / "first.json"
    recorded.write_text(json.dumps(first))
    again = eval_json(tmp_path, "--replay", str(recorded))
    assert again["provenance"]["track_settings"]["correctness"]["base_seed"] == seed
    assert seeds_and_errors(again) == seeds_and_errors(first)
    assert any(err for *_, err, _ in seeds_and_errors(first)), "softmax errors are not all zero: a real check"


def test_replay_of_a_file_that_is_not_a_verdict_is_one_line(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.json"
    bogus.write_text("{}")
    done = subprocess.run([sys.executable, "-m", "agentforge", "eval", str(TASK), str(KERNEL), "--backend", "cpu",
                           "--replay", str(bogus), "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert json.loads(done.stdout)["error"]["type"] == "BadReplay"
    assert "Traceback" not in done.stderr
