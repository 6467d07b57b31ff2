"""`agentforge gpu`: the spec table, --json, and --measure on whatever this machine has."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentforge.cli import app

runner = CliRunner()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_gpu_json(tmp_path) -> None:
    result = runner.invoke(app, ["gpu", "--json", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["cpu"]["name"] and report["cuda_available"] == _cuda()
    assert (report["gpu"] is None) == (not _cuda())
    assert report["ceilings"]["device_kind"] == ("cuda" if _cuda() else "cpu")


def test_gpu_table_on_this_machine(tmp_path) -> None:
    result = runner.invoke(app, ["gpu", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Ceilings" in result.output and "CPU:" in result.output
    if not _cuda():
        assert "No CUDA GPU is visible" in result.output
        assert "agentforge gpu --measure" in result.output


def test_gpu_measure_cpu_records_ceilings(tmp_path) -> None:
    result = runner.invoke(app, ["gpu", "--measure", "--device", "cpu", "--json", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    ceilings = json.loads(result.output)["ceilings"]
    assert json.loads(result.output)["threads"] == 1  # the evaluator's CPU pin
    assert ceilings["sources"] == {k: "measured" for k in ("bandwidth", "fp32", "bf16", "fp16")}
    assert ceilings["memory_bandwidth_gbs"] > 0 and ceilings["peak_tflops"]["fp32"] > 0
    files = list((tmp_path / "ceilings").glob("*.json"))
    assert [str(f) for f in files] == [ceilings["path"]]
    # a later plain call reads them back
    again = runner.invoke(app, ["gpu", "--device", "cpu", "--cache-dir", str(tmp_path)])
    assert again.exit_code == 0 and "measured" in again.output
    # ... for the thread count they were measured on only
    other = runner.invoke(app, ["gpu", "--device", "cpu", "--threads", "2", "--json", "--cache-dir", str(tmp_path)])
    assert other.exit_code == 0 and json.loads(other.output)["ceilings"]["sources"] == {}


def test_gpu_device_cuda_without_gpu(tmp_path) -> None:
    if _cuda():
        pytest.skip("a CUDA device is visible")
    result = runner.invoke(app, ["gpu", "--device", "cuda", "--cache-dir", str(tmp_path)])
    assert result.exit_code == 2 and "no CUDA GPU" in result.output


def test_gpu_help_lists_the_options() -> None:
    result = runner.invoke(app, ["gpu", "--help"])
    assert result.exit_code == 0
    for option in ("--measure", "--json", "--device", "--cache-dir"):
        assert option in result.output
