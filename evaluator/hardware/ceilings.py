"""Ceilings: the bandwidth and FLOP/s a roofline divides by, measured where possible.

Call these:

- `measure_ceilings(device="cuda", path=None, cache_dir="~/.cache/agentforge") -> Ceilings`:
  on a GPU, a large device-to-device copy (bytes read + written / time) and large GEMMs
  (2*N^3 / time) in bf16, fp16, fp32 (TF32 off) and tf32, timed with CUDA events; on the CPU,
  on `threads` threads (the evaluator pins CPU jobs to one by default), streams from 4 MiB up to
  `copy_bytes` (a copy and a read-only sum: data beyond a core's private caches, where the
  evaluator's flush leaves it) and fp32, bf16 and fp16 matmuls, timed with `time.perf_counter`. The best
  repeat, and on the CPU the best stream and size, is kept (a ceiling must be reachable, so that
  the floor derived from it stays a lower bound), and the result is written as JSON to `path`, by
  default `<cache_dir>/ceilings/<device-slug>.json` (`<cpu-slug>-<threads>t.json` on the CPU: a
  ceiling holds for the thread count it was measured on).
- `load_ceilings(device="cuda", path=None, cache_dir=..., spec=None) -> Ceilings`: the datasheet
  figures of the device, each replaced by its measured value where a ceilings file for the same
  device name exists. `Ceilings.sources` says, per figure, which one it is.

`device` is "cpu", "cuda" or "cuda:N". torch is imported inside the functions.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentforge.evaluator.hardware.specs import DTYPES, GpuSpec, device_slug, probe_cpu, probe_gpu

DEFAULT_CACHE_DIR = "~/.cache/agentforge"
SCHEMA_VERSION = 1

_DTYPE_ALIASES = {
    "float32": "fp32", "float": "fp32", "fp32": "fp32",
    "tf32": "tf32", "tensorfloat32": "tf32",
    "bfloat16": "bf16", "bf16": "bf16",
    "float16": "fp16", "half": "fp16", "fp16": "fp16",
    "fp8": "fp8", "float8": "fp8", "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "e4m3": "fp8", "e5m2": "fp8",
}


def normalize_dtype(dtype: Any) -> str | None:
    """`torch.bfloat16`, "bfloat16", "bf16" -> "bf16"; None for a dtype with no peak (int, fp64)."""
    text = str(dtype).lower().removeprefix("torch.")
    return _DTYPE_ALIASES.get(text)


@dataclass(frozen=True)
class Ceilings:
    device_kind: str  # cuda | cpu
    device_name: str
    memory_bandwidth_gbs: float | None = None  # GB/s (1e9 B/s), bytes read + written
    peak_tflops: dict[str, float] = field(default_factory=dict)  # by dtype: fp32 tf32 bf16 fp16 fp8
    sources: dict[str, str] = field(default_factory=dict)  # "bandwidth" and each dtype: measured | datasheet
    measured_at: str = ""
    path: str = ""  # the ceilings file read or written, if any

    def bytes_per_s(self) -> float | None:
        return None if self.memory_bandwidth_gbs is None else self.memory_bandwidth_gbs * 1e9

    def flops_per_s(self, dtype: Any = "fp32") -> float | None:
        key = normalize_dtype(dtype)
        peak = self.peak_tflops.get(key) if key else None
        return None if peak is None else peak * 1e12

    def source_of(self, *keys: str) -> str:
        """measured | datasheet | measured+datasheet | unknown, over the figures named."""
        found = {self.sources.get(k, "unknown") for k in keys}
        found.discard("unknown")
        if not found:
            return "unknown"
        return found.pop() if len(found) == 1 else "measured+datasheet"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def default_ceilings_path(device_name: str, cache_dir: str | Path = DEFAULT_CACHE_DIR,
                          threads: int | None = None) -> Path:
    """Where a device's measured ceilings live; CPU ones name their thread count."""
    suffix = f"-{threads}t" if threads else ""
    return Path(cache_dir).expanduser() / "ceilings" / f"{device_slug(device_name)}{suffix}.json"


def evaluator_threads() -> int:
    """The CPU threads an evaluation runs on unless its job says otherwise (`EvalJob.cpu_threads`)."""
    from agentforge.evaluator.result import EvalJob

    return int(EvalJob.__dataclass_fields__["cpu_threads"].default)


def ceilings_from_spec(spec: GpuSpec) -> Ceilings:
    peaks = {k: v for k, v in spec.peak_tflops.items() if v is not None}
    sources = {k: "datasheet" for k in peaks}
    if spec.memory_bandwidth_gbs is not None:
        sources["bandwidth"] = "datasheet"
    return Ceilings("cuda", spec.name, spec.memory_bandwidth_gbs, peaks, sources)


def _parse_device(device: str) -> tuple[str, int]:
    if device == "cpu":
        return "cpu", 0
    if device == "cuda" or device.startswith("cuda:"):
        return "cuda", int(device.partition(":")[2] or 0)
    raise ValueError(f"device must be cpu, cuda or cuda:N (got {device!r})")


def read_ceilings_file(path: str | Path) -> dict[str, Any] | None:
    """The measured record in `path`, or None when absent, unreadable or of another schema."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_VERSION:
        return None
    return data


def load_ceilings(
    device: str = "cuda",
    path: str | Path | None = None,
    cache_dir: str | Path = DEFAULT_CACHE_DIR,
    spec: GpuSpec | None = None,
    threads: int | None = None,
) -> Ceilings:
    """Datasheet ceilings of the device, overlaid figure by figure with measured ones.

    A file measured on a device of another name, or on the CPU with another thread count
    (`threads`, by default the calling process's torch threads, which the evaluator pins), is
    ignored. Without a CUDA device (for device="cuda") the result names no device and has no
    figures (sources "unknown")."""
    kind, index = _parse_device(device)
    if kind == "cpu":
        base = Ceilings("cpu", probe_cpu().name)
        threads = threads or _torch_threads()
    else:
        threads = None
        spec = spec or probe_gpu(index)
        if spec is None:
            return Ceilings("cuda", "no CUDA device")
        base = ceilings_from_spec(spec)
    file = Path(path) if path else default_ceilings_path(base.device_name, cache_dir, threads)
    data = read_ceilings_file(file)
    if data is None or data.get("device_name") != base.device_name:
        return base
    if threads is not None and data.get("threads") != threads:
        return base
    return _overlay(base, data, file)


def _overlay(base: Ceilings, data: dict[str, Any], file: Path) -> Ceilings:
    peaks, sources = dict(base.peak_tflops), dict(base.sources)
    bandwidth = base.memory_bandwidth_gbs
    if isinstance(data.get("memory_bandwidth_gbs"), int | float):
        bandwidth = float(data["memory_bandwidth_gbs"])
        sources["bandwidth"] = "measured"
    for dtype, value in (data.get("peak_tflops") or {}).items():
        if dtype in DTYPES and isinstance(value, int | float):
            peaks[dtype] = float(value)
            sources[dtype] = "measured"
    return dataclasses.replace(base, memory_bandwidth_gbs=bandwidth, peak_tflops=peaks, sources=sources,
                               measured_at=str(data.get("measured_at", "")), path=str(file))


# ----- measurement --------------------------------------------------------------------------
def measure_ceilings(
    device: str = "cuda",
    path: str | Path | None = None,
    cache_dir: str | Path = DEFAULT_CACHE_DIR,
    *,
    copy_bytes: int | None = None,
    gemm_n: int | None = None,
    repeats: int = 10,
    threads: int | None = None,
) -> Ceilings:
    """Measure the device's bandwidth and GEMM throughput, write them to `path`, and return the
    merged ceilings (measured figures over datasheet ones). On the CPU, on `threads` threads
    (default: the evaluator's, `evaluator_threads()`). Raises RuntimeError for device="cuda"
    without a CUDA device."""
    kind, index = _parse_device(device)
    if kind == "cuda":
        threads = None
        spec = probe_gpu(index)
        if spec is None:
            raise RuntimeError("no CUDA device is visible to torch; measure with device='cpu'")
        name = spec.name
        bandwidth, peaks, details = _measure_gpu(index, copy_bytes, gemm_n or 8192, repeats)
    else:
        spec = None
        name = probe_cpu().name
        threads = threads or evaluator_threads()
        bandwidth, peaks, details = _measure_cpu(copy_bytes or 256 * 1024 * 1024, gemm_n or 2048, repeats, threads)
    record = {
        "schema": SCHEMA_VERSION,
        "device_kind": kind,
        "device_name": name,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "memory_bandwidth_gbs": round(bandwidth, 1),
        "peak_tflops": {k: round(v, 3) for k, v in peaks.items()},
        "details": details,
    }
    if threads is not None:
        record["threads"] = threads
    file = Path(path) if path else default_ceilings_path(name, cache_dir, threads)
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(record, indent=2) + "\n")
    base = ceilings_from_spec(spec) if spec is not None else Ceilings("cpu", name)
    return _overlay(base, record, file)


def _best(samples_s: list[float]) -> float:
    return min(samples_s)


def _time_host(fn: Callable[[], Any], repeats: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def _time_cuda(fn: Callable[[], Any], repeats: int, warmup: int = 3) -> list[float]:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeats)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in events]


_Measured = tuple[float, dict[str, float], dict[str, Any]]  # bandwidth GB/s, TFLOP/s by dtype, details


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


CPU_STREAM_MIN_BYTES = 4 * 1024 * 1024  # past a core's private caches (L2 is 0.5-2 MiB a core)


def _streams_gbs(size: int, repeats: int) -> dict[str, float]:
    """GB/s of a copy (read + write) and of a read-only sum over `size` bytes of float32."""
    import torch

    src = torch.ones(size // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    copy_s = _best(_time_host(lambda: dst.copy_(src), repeats))
    read_s = _best(_time_host(lambda: src.sum(), repeats))
    return {"copy_gbs": 2 * size / copy_s / 1e9, "read_gbs": size / read_s / 1e9}


def _measure_cpu(copy_bytes: int, gemm_n: int, repeats: int, threads: int) -> _Measured:
    """Best bandwidth over streams of 4 MiB .. `copy_bytes` (a copy: bytes read + written; a sum:
    bytes read) and fp32 GEMM throughput, on `threads` torch threads. The smaller streams sit in
    the shared last-level cache, where the evaluator's flush (the core's own caches only) leaves a
    kernel's data: a ceiling measured in DRAM alone would put the floor above what kernels reach."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        by_size: dict[str, dict[str, float]] = {}
        size = min(CPU_STREAM_MIN_BYTES, copy_bytes)
        while size <= copy_bytes:
            by_size[str(size)] = _streams_gbs(size, repeats)
            size *= 4
        # Half GEMMs without matrix units run at a fraction of fp32's rate: smaller, fewer repeats.
        half_n, half_repeats = max(gemm_n // 2, 1), min(repeats, 3)
        gemm_s = {"fp32": _gemm_s(torch.float32, gemm_n, repeats),
                  "bf16": _gemm_s(torch.bfloat16, half_n, half_repeats),
                  "fp16": _gemm_s(torch.float16, half_n, half_repeats)}
    finally:
        torch.set_num_threads(saved)
    bandwidth = max(v for stream in by_size.values() for v in stream.values())
    fp32 = 2 * gemm_n**3 / gemm_s["fp32"] / 1e12
    # A half-precision operation can always run in fp32 (CPU kernels widen bf16 and fp16 to compute):
    # a half peak below the fp32 one (no AMX or AVX512-FP16 GEMM) would make a floor no kernel obeys.
    peaks = {"fp32": fp32, **{k: max(fp32, 2 * half_n**3 / gemm_s[k] / 1e12) for k in ("bf16", "fp16")}}
    details = {"method": "host perf_counter, best of repeats; bandwidth: best stream and size; half peaks at "
               "least the fp32 one", "copy_bytes": copy_bytes, "gemm_n": gemm_n, "half_gemm_n": half_n,
               "repeats": repeats, "threads": threads, "torch": torch.__version__, "bandwidth_gbs_by_bytes": by_size,
               **{f"gemm_{k}_s": v for k, v in gemm_s.items()}}
    return bandwidth, peaks, details


def _gemm_s(dtype: Any, n: int, repeats: int) -> float:
    """Best time of an n x n x n torch.mm in `dtype` on the current torch threads."""
    import torch

    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    return _best(_time_host(lambda: torch.mm(a, b), repeats))


def _measure_gpu(index: int, copy_bytes: int | None, gemm_n: int, repeats: int) -> _Measured:
    import torch

    device = torch.device("cuda", index)
    with torch.cuda.device(device):
        total = torch.cuda.get_device_properties(index).total_memory
        copy_bytes = copy_bytes or min(1 << 30, total // 8)
        src = torch.empty(copy_bytes, dtype=torch.uint8, device=device).fill_(1)
        dst = torch.empty_like(src)
        copy_s = _best(_time_cuda(lambda: dst.copy_(src), repeats))
        src = dst = None  # free 2 x copy_bytes before the GEMMs
        details: dict[str, Any] = {"method": "CUDA events, best of repeats", "copy_bytes": copy_bytes,
                                   "gemm_n": gemm_n, "repeats": repeats, "torch": torch.__version__,
                                   "cuda": torch.version.cuda, "copy_s": copy_s}
        peaks: dict[str, float] = {}
        saved_tf32 = torch.backends.cuda.matmul.allow_tf32
        try:
            for key, dtype, tf32 in (("bf16", torch.bfloat16, False), ("fp16", torch.float16, False),
                                     ("fp32", torch.float32, False), ("tf32", torch.float32, True)):
                torch.backends.cuda.matmul.allow_tf32 = tf32
                a = torch.randn(gemm_n, gemm_n, dtype=dtype, device=device)
                b = torch.randn(gemm_n, gemm_n, dtype=dtype, device=device)
                gemm_s = _best(_time_cuda(lambda a=a, b=b: torch.mm(a, b), repeats))
                peaks[key] = 2 * gemm_n**3 / gemm_s / 1e12
                details[f"gemm_{key}_s"] = gemm_s
                del a, b
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved_tf32
        torch.cuda.empty_cache()
    return 2 * copy_bytes / copy_s / 1e9, peaks, details
