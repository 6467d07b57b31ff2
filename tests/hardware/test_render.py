"""The judge's block and the Markdown report: short, and saying the right thing."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentforge.evaluator.hardware import ncu, render, roofline
from agentforge.evaluator.hardware.ceilings import ceilings_from_spec
from agentforge.evaluator.hardware.specs import CpuSpec, lookup_gpu
from agentforge.evaluator.result import CompileRecord, KernelResources, ProfileRecord

FIXTURES = Path(__file__).parent / "fixtures"
H100 = lookup_gpu("NVIDIA H100 80GB HBM3")
RTX4090 = lookup_gpu("NVIDIA GeForce RTX 4090")


def _profile(**totals: float) -> ProfileRecord:
    return ProfileRecord(available=True, kernels=({"name": "k", "gpu__time_duration.sum": 1000.0},),
                         totals={"kernels": 1.0, "duration_us": 1.0, **totals})


@pytest.mark.parametrize(("regs", "geometry", "occupancy"), [
    (128, (65536, 64), 0.25), (32, (65536, 64), 1.0), (255, (65536, 64), 0.125), (64, (65536, 64), 0.5),
    (128, (65536, 48), 16 / 48), (1, (65536, 64), 1.0),
])
def test_occupancy_from_registers(regs: int, geometry: tuple[int, int], occupancy: float) -> None:
    assert render.occupancy_from_registers(regs, *geometry) == pytest.approx(occupancy)


def test_prompt_from_the_fixture_profile() -> None:
    kernels = ncu.parse_raw_csv((FIXTURES / "raw_two_kernels.csv").read_text())
    profile = ProfileRecord(True, kernels=tuple(kernels), totals=ncu.summarize(kernels))
    ceilings = ceilings_from_spec(H100)
    rl = roofline.analyze(2 * 4096**3, 3 * 4096 * 4096 * 2, 400.0, ceilings, "bf16")
    text = render.render_prompt(H100, rl, profile, None, ceilings, measured_us=400.0, dtype="bf16")
    assert text.startswith("Device: NVIDIA H100 80GB HBM3 (132 SMs, 50 MiB L2, 3350 GB/s")
    assert "Roofline: compute-bound; floor 139 µs; measured 400 µs; 35% of speed of light" in text
    assert "Profile (ncu, 2 kernels, 41 µs): SM 61%, memory 78%, DRAM 37%" in text
    assert "registers 128/thread limit occupancy to 25%" in text
    assert "occupancy limited by registers (2 blocks/SM)" in text
    # the slowest kernel is listed first
    assert text.index("ampere_sgemm_128x64_nn") < text.index("elementwise_kernel")
    assert len(text.split()) < 250


def test_memory_bound_near_ceiling() -> None:
    text = render.render_prompt(profile=_profile(**{render.DRAM_PCT: 91.0, render.SM_PCT: 20.0,
                                                    render.MEM_PCT: 92.0}))
    assert "DRAM throughput 91% of peak: memory-bound, near ceiling" in text
    assert "latency-bound" not in text


def test_latency_bound_and_stall_hints() -> None:
    found = render.hints(profile=_profile(**{
        render.SM_PCT: 12.0, render.MEM_PCT: 15.0, render.SECTOR_USE: 25.0, render.BRANCH_UNIFORM: 70.0,
        "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct": 55.0,
        "smsp__warp_issue_stalled_barrier_per_warp_active.pct": 10.0}))
    assert any("neither is busy, latency-bound" in h for h in found)
    assert "main warp stall: long_scoreboard 55% (waiting on global/local memory)" in found
    assert any("25% of each 32-byte sector" in h for h in found)
    assert any("70% uniform" in h for h in found)


def test_register_occupancy_uses_the_devices_warp_count() -> None:
    found = render.hints(RTX4090, profile=_profile(**{render.REGISTERS: 96.0}))
    assert "registers 96/thread limit occupancy to 44%" in found  # 21 warps of 48
    assert not render.hints(H100, profile=_profile(**{render.REGISTERS: 32.0}))


def test_unavailable_profile_is_said_once() -> None:
    record = ProfileRecord(available=False, reason="ERR_NVGPUCTRPERM: no permission")
    text = render.render_prompt(profile=record)
    assert text == "Profile: unavailable (ERR_NVGPUCTRPERM: no permission)"


def test_compiler_hints() -> None:
    compile_record = CompileRecord(
        ok=True, backend="cuda",
        resources=(KernelResources("gemm", registers=168, shared_bytes=49152, stack_bytes=64,
                                   spill_store_bytes=120, spill_load_bytes=96),),
        sass_histogram={"LDG.E": 10, "FFMA": 200, "STL": 4, "LDL": 4})
    rl = roofline.analyze(0, 4e9, 4000.0, ceilings_from_spec(H100))
    text = render.render_prompt(H100, rl, compile=compile_record, dtype="bf16", measured_us=4000.0)
    assert "Compiler: gemm: 168 regs, 49.2 KB smem, 216 B spills" in text
    assert "SASS: tensor cores no, 128-bit loads no, local memory yes" in text
    assert "gemm: ptxas spills 120 B stores / 96 B loads to local memory; cut live registers" in text
    assert "gemm: registers 168/thread limit occupancy to 19%" in text  # 12 warps of 64
    assert any("LDG.E.64/128" in h for h in render.hints(H100, rl, compile=compile_record))


def test_faster_than_light_is_called_out() -> None:
    rl = roofline.analyze(0, 4e9, 100.0, ceilings_from_spec(H100))
    assert rl.sol_fraction > 1
    assert "faster than the speed-of-light floor" in render.hints(roofline=rl)[0]


def test_cpu_spec_line() -> None:
    cpu = CpuSpec("AMD EPYC", logical_cores=2, flags=("avx2", "fma"))
    assert render.render_prompt(cpu) == "Device: AMD EPYC (2 cores, avx2/fma)"


def test_markdown_has_every_section() -> None:
    kernels = ncu.parse_raw_csv((FIXTURES / "raw_two_kernels.csv").read_text())
    profile = ProfileRecord(True, kernels=tuple(kernels), totals=ncu.summarize(kernels))
    ceilings = ceilings_from_spec(H100)
    rl = roofline.analyze(1e9, 1e9, 1000.0, ceilings)
    compile_record = CompileRecord(ok=True, backend="cuda", resources=(KernelResources("k", registers=40),),
                                   sass_histogram={"HMMA.16816.F32": 8, "LDG.E.128": 4})
    md = render.render_markdown(H100, rl, profile, compile_record, ceilings, measured_us=1000.0)
    for heading in ("## Hardware feedback", "### Device", "### Ceilings", "### Roofline", "### Compiler",
                    "### Profile", "### Hints"):
        assert heading in md
    assert "| bandwidth GB/s | 3,350 | datasheet |" in md
    assert "| HMMA.16816.F32 | 8 |" in md
    assert "| dram__bytes.sum | 72,351,744 |" in md
    assert "Unavailable: nope" in render.render_markdown(profile=ProfileRecord(False, reason="nope"))
