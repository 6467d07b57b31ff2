"""Measured ceilings: written per machine, preferred over the datasheet, ignored when foreign."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agentforge.evaluator.hardware.ceilings import (
    Ceilings,
    default_ceilings_path,
    load_ceilings,
    measure_ceilings,
    normalize_dtype,
)
from agentforge.evaluator.hardware.specs import lookup_gpu

H100 = lookup_gpu("NVIDIA H100 80GB HBM3")


def _write(path, **fields) -> None:
    record = {"schema": 1, "device_kind": "cuda", "device_name": H100.name, "measured_at": "2026-01-01T00:00:00",
              "memory_bandwidth_gbs": 3000.0, "peak_tflops": {"bf16": 798.0}}
    record.update(fields)
    path.write_text(json.dumps(record))


def test_datasheet_only_without_a_file(tmp_path) -> None:
    ceilings = load_ceilings("cuda", cache_dir=tmp_path, spec=H100)
    assert ceilings.memory_bandwidth_gbs == 3350.0
    assert ceilings.sources == {"bandwidth": "datasheet", "fp32": "datasheet", "tf32": "datasheet",
                                "bf16": "datasheet", "fp16": "datasheet", "fp8": "datasheet"}
    assert ceilings.path == ""


def test_measured_figures_replace_datasheet_ones_figure_by_figure(tmp_path) -> None:
    path = default_ceilings_path(H100.name, tmp_path)
    assert path == tmp_path / "ceilings" / "nvidia-h100-80gb-hbm3.json"
    path.parent.mkdir(parents=True)
    _write(path)
    ceilings = load_ceilings("cuda", cache_dir=tmp_path, spec=H100)
    assert ceilings.memory_bandwidth_gbs == 3000.0 and ceilings.sources["bandwidth"] == "measured"
    assert ceilings.peak_tflops["bf16"] == 798.0 and ceilings.sources["bf16"] == "measured"
    assert ceilings.peak_tflops["fp32"] == 67.0 and ceilings.sources["fp32"] == "datasheet"
    assert ceilings.flops_per_s("torch.bfloat16") == pytest.approx(798e12)
    assert ceilings.bytes_per_s() == pytest.approx(3e12)
    assert ceilings.source_of("bf16", "bandwidth") == "measured"
    assert ceilings.source_of("fp32", "bandwidth") == "measured+datasheet"
    assert ceilings.path == str(path)


def test_a_file_from_another_device_or_schema_is_ignored(tmp_path) -> None:
    other = tmp_path / "other.json"
    _write(other, device_name="NVIDIA H100 PCIe")
    assert load_ceilings("cuda", path=other, spec=H100).sources["bandwidth"] == "datasheet"
    _write(other, schema=99)
    assert load_ceilings("cuda", path=other, spec=H100).sources["bandwidth"] == "datasheet"
    other.write_text("{not json")
    assert load_ceilings("cuda", path=other, spec=H100).memory_bandwidth_gbs == 3350.0


def test_measure_on_cpu_writes_and_reloads(tmp_path) -> None:
    path = tmp_path / "cpu.json"
    measured = measure_ceilings("cpu", path=path, copy_bytes=8 * 1024 * 1024, gemm_n=256, repeats=3)
    data = json.loads(path.read_text())
    assert data["schema"] == 1 and data["device_kind"] == "cpu"
    assert data["memory_bandwidth_gbs"] > 0.1 and data["peak_tflops"]["fp32"] > 0
    assert data["details"]["copy_bytes"] == 8 * 1024 * 1024
    assert measured.sources == {k: "measured" for k in ("bandwidth", "fp32", "bf16", "fp16")}
    # bf16 and fp16 work can always run at fp32's rate: their peaks are never below it
    assert min(data["peak_tflops"]["bf16"], data["peak_tflops"]["fp16"]) >= data["peak_tflops"]["fp32"]
    again = load_ceilings("cpu", path=path, threads=1)
    assert again.memory_bandwidth_gbs == data["memory_bandwidth_gbs"]
    assert again.peak_tflops["fp32"] == data["peak_tflops"]["fp32"]


def test_cpu_ceilings_hold_for_the_threads_they_were_measured_on(tmp_path) -> None:
    import torch

    saved = torch.get_num_threads()
    measured = measure_ceilings("cpu", cache_dir=tmp_path, copy_bytes=8 * 1024 * 1024, gemm_n=128, repeats=2,
                                threads=1)
    assert torch.get_num_threads() == saved  # measured on 1 thread, then put back
    data = json.loads((tmp_path / "ceilings" / Path(measured.path).name).read_text())
    assert Path(measured.path).name.endswith("-1t.json") and data["threads"] == 1
    assert data["details"]["threads"] == 1
    # Streams from 4 MiB up: a size per factor of 4, each with a copy and a read figure; the best is the ceiling.
    streams = data["details"]["bandwidth_gbs_by_bytes"]
    assert list(streams) == [str(4 * 2**20)] and set(streams[str(4 * 2**20)]) == {"copy_gbs", "read_gbs"}
    assert data["memory_bandwidth_gbs"] == pytest.approx(max(streams[str(4 * 2**20)].values()), abs=0.05)
    assert load_ceilings("cpu", cache_dir=tmp_path, threads=1).sources["bandwidth"] == "measured"
    assert load_ceilings("cpu", cache_dir=tmp_path, threads=2).sources == {}  # another thread count: unknown


def test_cpu_without_measurement_has_no_figures(tmp_path) -> None:
    ceilings = load_ceilings("cpu", cache_dir=tmp_path)
    assert ceilings.device_kind == "cpu" and ceilings.memory_bandwidth_gbs is None
    assert ceilings.source_of("fp32", "bandwidth") == "unknown"


def test_bad_device_string() -> None:
    with pytest.raises(ValueError, match="cpu, cuda or cuda:N"):
        load_ceilings("tpu")


def test_no_cuda_device(tmp_path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    assert load_ceilings("cuda", cache_dir=tmp_path) == Ceilings("cuda", "no CUDA device")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        measure_ceilings("cuda", cache_dir=tmp_path)


@pytest.mark.parametrize(("dtype", "key"), [("float32", "fp32"), ("torch.bfloat16", "bf16"), ("half", "fp16"),
                                            ("float8_e4m3fn", "fp8"), ("int8", None), ("float64", None)])
def test_normalize_dtype(dtype: str, key: str | None) -> None:
    assert normalize_dtype(dtype) == key


@pytest.mark.gpu
def test_measure_on_gpu(tmp_path) -> None:
    measured = measure_ceilings("cuda", path=tmp_path / "gpu.json", copy_bytes=256 * 1024 * 1024,
                                gemm_n=4096, repeats=5)
    assert measured.sources["bandwidth"] == "measured" and measured.memory_bandwidth_gbs > 100
    assert measured.peak_tflops["bf16"] > measured.peak_tflops["fp32"] > 1
