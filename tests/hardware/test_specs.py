"""Spec table lookups, the merge with device properties, and the CPU probe."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from agentforge.evaluator.hardware.specs import (
    KNOWN_GPUS,
    device_slug,
    gpu_spec_from_properties,
    lookup_gpu,
    probe_cpu,
    probe_gpu,
)


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 SXM5 80GB", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm"),
        ("NVIDIA A100-SXM4-40GB", "a100-sxm-40gb"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie"),
        ("NVIDIA A100-PCIE-40GB", "a100-pcie-40gb"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA GeForce RTX 3090", "rtx-3090"),
        ("NVIDIA B200", "b200"),
    ],
)
def test_lookup_by_name(name: str, label: str) -> None:
    spec = lookup_gpu(name)
    assert spec is not None and spec.label == label and spec.name == name
    assert spec.peak_tflops["bf16"] > spec.peak_tflops["fp32"] > 0


def test_h100_sxm_and_pcie_differ_where_the_datasheets_do() -> None:
    sxm, pcie = lookup_gpu("NVIDIA H100 80GB HBM3"), lookup_gpu("NVIDIA H100 PCIe")
    assert (sxm.sm_count, pcie.sm_count) == (132, 114)
    assert (sxm.memory_bandwidth_gbs, pcie.memory_bandwidth_gbs) == (3350.0, 2000.0)
    assert sxm.peak_tflops["bf16"] == pytest.approx(989.4)
    assert pcie.peak_tflops["bf16"] == pytest.approx(756.0)
    assert sxm.l2_bytes == 50 * 1024 * 1024 and sxm.max_warps_per_sm == 64


def test_unknown_and_near_miss_names_are_not_guessed() -> None:
    assert lookup_gpu("Tesla T4") is None
    assert lookup_gpu("NVIDIA H100 NVL") is None  # not an SXM part: different memory and clocks
    assert lookup_gpu("NVIDIA GeForce RTX 3090 Ti") is None
    assert set(KNOWN_GPUS) >= {"h100-sxm", "h100-pcie", "h200", "a100-sxm", "a100-pcie", "l40s",
                               "rtx-4090", "rtx-3090", "b200"}


def test_a100_memory_decides_the_bandwidth_row() -> None:
    small = lookup_gpu("NVIDIA A100-SXM4", total_memory_bytes=40 * 10**9)
    large = lookup_gpu("NVIDIA A100-SXM4", total_memory_bytes=80 * 10**9)
    assert small.memory_bandwidth_gbs == 1555.0 and small.name == "NVIDIA A100-SXM4"
    assert large.memory_bandwidth_gbs == 2039.0


def test_device_properties_win_over_the_table() -> None:
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", major=9, minor=0, total_memory=85_045_000_000,
                            multi_processor_count=132, L2_cache_size=52_428_800, regs_per_multiprocessor=65536,
                            max_threads_per_multi_processor=2048, memory_clock_rate=2_619_000,
                            memory_bus_width=5120, clock_rate=0)
    spec = gpu_spec_from_properties(props)
    assert spec.label == "h100-sxm" and spec.source == "device+datasheet"
    assert spec.capability == "9.0" and spec.memory_gb == 85.0
    assert spec.memory_bandwidth_gbs == pytest.approx(3352.3, abs=0.1)  # 2 x 2.619 GHz x 640 B
    assert spec.boost_clock_mhz == 1980  # clock_rate 0 (unreadable) keeps the datasheet value
    assert spec.peak_tflops["fp8"] == pytest.approx(1978.9)


def test_unknown_gpu_keeps_what_the_device_says_and_nothing_more() -> None:
    props = SimpleNamespace(name="Tesla T4", major=7, minor=5, total_memory=15_000_000_000,
                            multi_processor_count=40, L2_cache_size=4 * 1024 * 1024)
    spec = gpu_spec_from_properties(props)
    assert spec.label == "unknown" and spec.source == "device"
    assert spec.sm_count == 40 and spec.l2_bytes == 4 * 1024 * 1024
    assert spec.peak_tflops == {} and spec.memory_bandwidth_gbs is None and spec.registers_per_sm is None


def test_probe_cpu_reads_proc_files(tmp_path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse avx avx2 fma avx512f\n"
                       "processor\t: 1\nmodel name\t: Test CPU 9000\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree: 1 kB\n")
    spec = probe_cpu(cpuinfo, meminfo)
    assert spec.name == "Test CPU 9000"
    assert spec.flags == ("avx", "avx2", "fma", "avx512f")
    assert spec.memory_gb == pytest.approx(16.8, abs=0.1)
    assert spec.logical_cores and spec.logical_cores >= 1


def test_probe_cpu_without_proc_files(tmp_path) -> None:
    spec = probe_cpu(tmp_path / "missing", tmp_path / "missing2")
    assert spec.name == "unknown CPU" and spec.memory_gb is None and spec.flags == ()


def test_device_slug() -> None:
    assert device_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert device_slug("AMD EPYC 9654 96-Core Processor") == "amd-epyc-9654-96-core-processor"
    assert device_slug("///") == "unknown"


def test_probe_gpu_is_none_without_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    assert probe_gpu() is None


@pytest.mark.gpu
def test_probe_gpu_reads_the_device() -> None:
    spec = probe_gpu()
    assert spec is not None and spec.sm_count and spec.sm_count > 0
    assert spec.l2_bytes and spec.l2_bytes > 0
