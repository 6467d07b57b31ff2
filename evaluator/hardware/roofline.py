"""The roofline: how fast a kernel could possibly be, and how close a measured one came.

Call these:

- `floor_us(flops, bytes_moved, ceilings, dtype="fp32") -> float | None`: the speed-of-light
  time, max(flops / peak FLOP/s, bytes / bandwidth), in microseconds. A term whose input or
  ceiling is unknown is left out, so the floor stays a lower bound; None when neither term can
  be computed. The evaluator's speed-of-light integrity rule flags a time under this floor.
- `analyze(flops, bytes_moved, measured_us, ceilings, dtype="fp32") -> RooflineRecord`: the floor,
  arithmetic intensity, SoL fraction (floor / measured, not clipped: above 1 means faster than
  physics allows) and a label.
- `io_bytes(tensors) -> int`: bytes of a set of tensors, the least traffic a kernel that reads its
  inputs and writes its outputs once must move (use it when a task declares no byte count).

Units: FLOPs and bytes as counts, ceilings in GB/s and TFLOP/s (`Ceilings`), times in µs.

The label rule (`classify`):
1. no floor -> "unknown";
2. "latency-bound" when the problem is small and the kernel far from both ceilings: the floor is
   under `LATENCY_FLOOR_US` (the scale of a few kernel launches) and the measured time is more
   than 1 / `LATENCY_MAX_SOL` times the floor. Such a kernel is limited by launch overhead, too
   little parallelism or dependent latency, and neither more bandwidth nor more FLOP/s helps;
3. otherwise "compute-bound" when the FLOP term of the floor is at least its byte term, else
   "memory-bound" (a kernel with zero FLOPs is memory-bound, zero bytes compute-bound);
4. "unknown" when one term is missing and the other is not zero (no dtype peak, no byte count).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentforge.evaluator.hardware.ceilings import Ceilings, normalize_dtype
from agentforge.evaluator.result import RooflineRecord

LATENCY_FLOOR_US = 10.0  # floors below this are a few launches' worth of time (2-5 µs each)
LATENCY_MAX_SOL = 0.2  # ... and a kernel reaching under 20 % of such a floor is latency-bound

MEMORY_BOUND = "memory-bound"
COMPUTE_BOUND = "compute-bound"
LATENCY_BOUND = "latency-bound"
UNKNOWN = "unknown"


def _terms(flops: float | None, bytes_moved: float | None, ceilings: Ceilings, dtype: Any
           ) -> tuple[float | None, float | None]:
    """(compute µs, memory µs); a term is None when its count or its ceiling is unknown.
    A zero count gives a zero term even without a ceiling."""
    peak, bandwidth = ceilings.flops_per_s(dtype), ceilings.bytes_per_s()
    compute = memory = None
    if flops is not None:
        compute = 0.0 if flops == 0 else (flops / peak * 1e6 if peak else None)
    if bytes_moved is not None:
        memory = 0.0 if bytes_moved == 0 else (bytes_moved / bandwidth * 1e6 if bandwidth else None)
    return compute, memory


def floor_us(
    flops: float | None, bytes_moved: float | None, ceilings: Ceilings, dtype: Any = "fp32"
) -> float | None:
    """Speed-of-light time in µs: max of the FLOP term and the byte term that can be computed."""
    known = [t for t in _terms(flops, bytes_moved, ceilings, dtype) if t is not None]
    if not known or max(known) <= 0:
        return None
    return max(known)


def classify(compute_us: float | None, memory_us: float | None, measured_us: float | None = None) -> str:
    """The label rule of the module docstring, from the two floor terms and a measured time."""
    known = [t for t in (compute_us, memory_us) if t is not None]
    floor = max(known) if known else None
    if floor is None or floor <= 0:
        return UNKNOWN
    if measured_us and floor < LATENCY_FLOOR_US and floor / measured_us < LATENCY_MAX_SOL:
        return LATENCY_BOUND
    if compute_us is None or memory_us is None:
        return UNKNOWN
    return COMPUTE_BOUND if compute_us >= memory_us else MEMORY_BOUND


def ridge_point(ceilings: Ceilings, dtype: Any = "fp32") -> float | None:
    """FLOP per byte where the two roofs meet: kernels below it are memory-bound at best."""
    peak, bandwidth = ceilings.flops_per_s(dtype), ceilings.bytes_per_s()
    return peak / bandwidth if peak and bandwidth else None


def analyze(
    flops: float | None,
    bytes_moved: float | None,
    measured_us: float | None,
    ceilings: Ceilings,
    dtype: Any = "fp32",
) -> RooflineRecord:
    compute, memory = _terms(flops, bytes_moved, ceilings, dtype)
    floor = floor_us(flops, bytes_moved, ceilings, dtype)
    intensity = flops / bytes_moved if flops is not None and bytes_moved else None
    sol = floor / measured_us if floor is not None and measured_us and measured_us > 0 else None
    key = normalize_dtype(dtype) or "fp32"
    used = [name for name, term in ((key, compute), ("bandwidth", memory)) if term]
    return RooflineRecord(
        flops=flops,
        bytes=bytes_moved,
        floor_us=floor,
        arithmetic_intensity=intensity,
        sol_fraction=sol,
        label=classify(compute, memory, measured_us),
        ceilings_source=ceilings.source_of(*used) if used else "unknown",
    )


def io_bytes(tensors: Iterable[Any]) -> int:
    """Bytes held by the tensors (anything with numel() and element_size()); others count 0."""
    total = 0
    for t in tensors:
        if hasattr(t, "numel") and hasattr(t, "element_size"):
            total += int(t.numel()) * int(t.element_size())
    return total
