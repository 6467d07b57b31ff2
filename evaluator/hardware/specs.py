"""What the device at hand is and what its datasheet promises.

Call these:

- `probe_gpu(index=0) -> GpuSpec | None`: the CUDA device's own properties (torch), merged with
  the datasheet row of a known GPU; None when torch sees no CUDA device.
- `lookup_gpu(name, total_memory_bytes=None) -> GpuSpec | None`: the datasheet row alone.
- `gpu_spec_from_properties(props) -> GpuSpec`: the merge, from any object shaped like
  `torch.cuda.get_device_properties(i)` (tests pass a namespace).
- `probe_cpu(cpuinfo_path="/proc/cpuinfo", meminfo_path="/proc/meminfo") -> CpuSpec`.
- `device_slug(name) -> str`: the file-name form of a device name (ceilings are stored by it).

Measured ceilings live in `ceilings.py` (`measure_ceilings`, `load_ceilings`); they are also
reachable from here by name for callers that think of them as part of the spec.

Peak FLOP/s are dense (no 2:4 sparsity), in TFLOP/s, from NVIDIA's datasheets; for GeForce and
Ada parts the tensor figures are the ones with fp32 accumulation, which is what PyTorch uses.
Device properties win over the table wherever torch can read them (SM count, memory, L2, shared
memory, registers); an unknown GPU keeps what the device says and leaves the rest None.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")

KB = 1024
MB = 1024 * 1024


@dataclass(frozen=True)
class GpuSpec:
    name: str
    label: str  # table key (h100-sxm, a100-pcie, ...) or "unknown"
    capability: str | None = None  # "9.0"
    sm_count: int | None = None
    max_threads_per_sm: int | None = None
    boost_clock_mhz: int | None = None
    memory_gb: float | None = None
    memory_bandwidth_gbs: float | None = None  # GB/s, 1e9 bytes per second
    l2_bytes: int | None = None
    smem_per_sm_bytes: int | None = None
    smem_per_block_bytes: int | None = None  # the opt-in maximum for one block
    registers_per_sm: int | None = None
    peak_tflops: dict[str, float] = field(default_factory=dict)  # dense, by dtype (DTYPES)
    source: str = "datasheet"  # datasheet | device+datasheet | device

    @property
    def max_warps_per_sm(self) -> int | None:
        return None if self.max_threads_per_sm is None else self.max_threads_per_sm // 32

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class CpuSpec:
    name: str
    logical_cores: int | None = None
    memory_gb: float | None = None
    flags: tuple[str, ...] = ()  # the vector extensions that matter for kernels (avx2, avx512f, ...)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _peaks(fp32: float, tf32: float | None, half: float, fp8: float | None) -> dict[str, float]:
    peaks = {"fp32": fp32, "bf16": half, "fp16": half}
    if tf32 is not None:
        peaks["tf32"] = tf32
    if fp8 is not None:
        peaks["fp8"] = fp8
    return peaks


# (label, name pattern, row). Patterns are tried in order on the lower-cased device name, so
# the more specific rows (PCIe, 40GB) come before the general ones.
_HOPPER = dict(capability="9.0", max_threads_per_sm=2048, l2_bytes=50 * MB, smem_per_sm_bytes=228 * KB,
               smem_per_block_bytes=227 * KB, registers_per_sm=65536)
_AMPERE_DC = dict(capability="8.0", max_threads_per_sm=2048, sm_count=108, boost_clock_mhz=1410,
                  l2_bytes=40 * MB, smem_per_sm_bytes=164 * KB, smem_per_block_bytes=163 * KB,
                  registers_per_sm=65536, peak_tflops=_peaks(19.5, 156.0, 312.0, None))
_CONSUMER = dict(max_threads_per_sm=1536, smem_per_sm_bytes=100 * KB, smem_per_block_bytes=99 * KB,
                 registers_per_sm=65536)

_TABLE: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("h200", r"h200", dict(_HOPPER, sm_count=132, boost_clock_mhz=1980, memory_gb=141.0,
                            memory_bandwidth_gbs=4800.0, peak_tflops=_peaks(67.0, 494.7, 989.4, 1978.9))),
    ("h100-pcie", r"h100.*pcie", dict(_HOPPER, sm_count=114, boost_clock_mhz=1755, memory_gb=80.0,
                                      memory_bandwidth_gbs=2000.0,
                                      peak_tflops=_peaks(51.2, 378.0, 756.0, 1513.0))),
    ("h100-sxm", r"h100(?!.*(pcie|nvl))", dict(_HOPPER, sm_count=132, boost_clock_mhz=1980, memory_gb=80.0,
                                               memory_bandwidth_gbs=3350.0,
                                               peak_tflops=_peaks(67.0, 494.7, 989.4, 1978.9))),
    ("a100-pcie-40gb", r"a100.*pcie.*40gb|a100.*40gb.*pcie",
     dict(_AMPERE_DC, memory_gb=40.0, memory_bandwidth_gbs=1555.0)),
    ("a100-pcie", r"a100.*pcie", dict(_AMPERE_DC, memory_gb=80.0, memory_bandwidth_gbs=1935.0)),
    ("a100-sxm-40gb", r"a100.*40gb", dict(_AMPERE_DC, memory_gb=40.0, memory_bandwidth_gbs=1555.0)),
    ("a100-sxm", r"a100", dict(_AMPERE_DC, memory_gb=80.0, memory_bandwidth_gbs=2039.0)),
    ("l40s", r"l40s", dict(_CONSUMER, capability="8.9", sm_count=142, boost_clock_mhz=2520, memory_gb=48.0,
                           memory_bandwidth_gbs=864.0, l2_bytes=96 * MB,
                           peak_tflops=_peaks(91.6, 183.0, 362.1, 733.0))),
    ("rtx-4090", r"rtx 4090(?! d)", dict(_CONSUMER, capability="8.9", sm_count=128, boost_clock_mhz=2520,
                                         memory_gb=24.0, memory_bandwidth_gbs=1008.0, l2_bytes=72 * MB,
                                         peak_tflops=_peaks(82.6, 82.6, 165.2, 330.3))),
    ("rtx-3090", r"rtx 3090(?! ti)", dict(_CONSUMER, capability="8.6", sm_count=82, boost_clock_mhz=1695,
                                          memory_gb=24.0, memory_bandwidth_gbs=936.0, l2_bytes=6 * MB,
                                          peak_tflops=_peaks(35.6, 35.6, 71.0, None))),
    # HGX B200 datasheet figures divided by its 8 GPUs; clocks not published per GPU.
    ("b200", r"\bb200\b", dict(capability="10.0", sm_count=148, max_threads_per_sm=2048, memory_gb=180.0,
                               memory_bandwidth_gbs=8000.0, l2_bytes=126 * MB, smem_per_sm_bytes=228 * KB,
                               smem_per_block_bytes=227 * KB, registers_per_sm=65536,
                               peak_tflops=_peaks(75.0, 1100.0, 2250.0, 4500.0))),
)

KNOWN_GPUS = tuple(label for label, _, _ in _TABLE)


def lookup_gpu(name: str, total_memory_bytes: int | None = None) -> GpuSpec | None:
    """The datasheet row whose pattern matches `name`, or None for a GPU not in the table.

    A100s that report their memory but not "40GB" in their name get the 40 GB row (and its
    lower bandwidth) when the device has under 60 GB.
    """
    lowered = name.lower()
    for label, pattern, row in _TABLE:
        if not re.search(pattern, lowered):
            continue
        if label in ("a100-sxm", "a100-pcie") and total_memory_bytes and total_memory_bytes < 60e9:
            smaller = lookup_gpu(name + " 40GB")
            return dataclasses.replace(smaller, name=name) if smaller else None
        return GpuSpec(name=name, label=label, source="datasheet", **row)
    return None


def _positive(value: Any) -> Any:
    """Device properties report 0 for what they cannot read (e.g. clocks under CUDA 13)."""
    return value if isinstance(value, int | float) and value > 0 else None


def gpu_spec_from_properties(props: Any) -> GpuSpec:
    """Merge `torch.cuda.get_device_properties(i)` (or anything with its attribute names) with
    the datasheet row of a known GPU. Readable device values win; missing ones stay None."""
    name = str(getattr(props, "name", "unknown GPU"))
    total_memory = _positive(getattr(props, "total_memory", None))
    row = lookup_gpu(name, total_memory)
    base = row.to_dict() if row else {"name": name, "label": "unknown", "source": "device"}

    major, minor = getattr(props, "major", None), getattr(props, "minor", None)
    device: dict[str, Any] = {
        "capability": f"{major}.{minor}" if major is not None and minor is not None else None,
        "sm_count": _positive(getattr(props, "multi_processor_count", None)),
        "max_threads_per_sm": _positive(getattr(props, "max_threads_per_multi_processor", None)),
        "memory_gb": round(total_memory / 1e9, 1) if total_memory else None,
        "l2_bytes": _positive(getattr(props, "L2_cache_size", None)),
        "smem_per_sm_bytes": _positive(getattr(props, "shared_memory_per_multiprocessor", None)),
        "smem_per_block_bytes": _positive(getattr(props, "shared_memory_per_block_optin", None)),
        "registers_per_sm": _positive(getattr(props, "regs_per_multiprocessor", None)),
    }
    clock_khz = _positive(getattr(props, "clock_rate", None))
    if clock_khz:
        device["boost_clock_mhz"] = int(clock_khz // 1000)
    mem_khz = _positive(getattr(props, "memory_clock_rate", None))
    bus_bits = _positive(getattr(props, "memory_bus_width", None))
    if mem_khz and bus_bits:  # double data rate: two transfers per clock
        device["memory_bandwidth_gbs"] = round(mem_khz * 1e3 * 2 * bus_bits / 8 / 1e9, 1)
    readable = {k: v for k, v in device.items() if v is not None}
    merged = {**base, **readable, "name": name}
    if readable:
        merged["source"] = "device+datasheet" if row else "device"
    return GpuSpec(**merged)


def probe_gpu(index: int = 0) -> GpuSpec | None:
    """The spec of CUDA device `index`, or None when torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available() or index >= torch.cuda.device_count():
        return None
    return gpu_spec_from_properties(torch.cuda.get_device_properties(index))


_CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_bf16", "amx_bf16", "amx_tile",
              "neon", "asimd", "sve")


def probe_cpu(
    cpuinfo_path: str | Path = "/proc/cpuinfo", meminfo_path: str | Path = "/proc/meminfo"
) -> CpuSpec:
    """Name and vector extensions from /proc/cpuinfo, memory from /proc/meminfo, cores from the OS.
    Missing files (macOS, a locked-down sandbox) leave the fields None."""
    name, flags = "unknown CPU", ()
    try:
        text = Path(cpuinfo_path).read_text(errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "hardware", "cpu model") and name == "unknown CPU" and value.strip():
            name = value.strip()
        elif key in ("flags", "features") and not flags:
            present = set(value.split())
            flags = tuple(f for f in _CPU_FLAGS if f in present)
    memory_gb = None
    try:
        for line in Path(meminfo_path).read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_gb = round(int(line.split()[1]) * 1024 / 1e9, 1)
                break
    except (OSError, ValueError, IndexError):
        pass
    return CpuSpec(name=name, logical_cores=os.cpu_count(), memory_gb=memory_gb, flags=flags)


def device_slug(name: str) -> str:
    """`NVIDIA H100 80GB HBM3` -> `nvidia-h100-80gb-hbm3`: safe as a file name."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return slug or "unknown"


def __getattr__(name: str) -> Any:
    # Ceilings live in their own module; reachable from here without an import cycle.
    if name in ("Ceilings", "measure_ceilings", "load_ceilings", "default_ceilings_path"):
        from agentforge.evaluator.hardware import ceilings

        return getattr(ceilings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
