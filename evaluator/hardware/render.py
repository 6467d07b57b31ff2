"""Hardware feedback as text: a compact block for the judge's prompt, Markdown for run reports.

Call these:

- `render_prompt(spec=None, roofline=None, profile=None, compile=None, ceilings=None,
  measured_us=None, dtype=None) -> str`: a few hundred tokens: device, roofline verdict, compiler
  resources, the top profile metrics, and at most `MAX_HINTS` bottleneck hints.
- `render_markdown(...)` (same arguments) -> str: the fuller version with tables.
- `hints(...)` (same arguments) -> list[str]: the bottleneck hints alone, most telling first.
- `occupancy_from_registers(registers_per_thread, registers_per_sm=65536, max_warps_per_sm=64)`:
  the occupancy a register count allows (128 registers/thread -> 0.25 on Hopper).

Every argument is optional: a CPU run has no profile, a compile-only verdict no timing. The judge
was found to do worse with every metric than with a curated few, so this picks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentforge.evaluator.hardware.ceilings import Ceilings, normalize_dtype
from agentforge.evaluator.hardware.compile_report import summarize_sass
from agentforge.evaluator.hardware.specs import CpuSpec, GpuSpec
from agentforge.evaluator.result import CompileRecord, ProfileRecord, RooflineRecord

MAX_HINTS = 5
PROMPT_KERNELS = 3

SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEM_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_PCT = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_PCT_ALT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
ACHIEVED_OCC = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL_OCC = "sm__maximum_warps_per_active_cycle_pct"
REGISTERS = "launch__registers_per_thread"
SECTOR_USE = "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"
BRANCH_UNIFORM = "smsp__sass_average_branch_targets_threads_uniform.pct"
TENSOR_PIPE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
L1_HIT = "l1tex__t_sector_hit_rate.pct"
L2_HIT = "lts__t_sector_hit_rate.pct"
STALLS = {
    "long_scoreboard": "waiting on global/local memory",
    "short_scoreboard": "waiting on shared memory or special functions",
    "memory_dependency": "waiting on a memory dependency",
    "barrier": "waiting at __syncthreads",
    "branch_resolving": "resolving branches",
}
OCC_LIMITS = ("blocks", "registers", "shared_mem", "warps")

NEAR_CEILING_PCT = 80.0
IDLE_PCT = 40.0


def occupancy_from_registers(registers_per_thread: float, registers_per_sm: int = 65536,
                             max_warps_per_sm: int = 64) -> float:
    """Fraction of the SM's warp slots that fit, by registers alone (allocated per warp in units
    of 256, i.e. per thread rounded up to a multiple of 8)."""
    per_thread = max(8, -(-int(registers_per_thread) // 8) * 8)
    warps = registers_per_sm // (per_thread * 32)
    return min(warps, max_warps_per_sm) / max_warps_per_sm


def _pct(totals: Mapping[str, float], *keys: str) -> float | None:
    for key in keys:
        if isinstance(totals.get(key), int | float):
            return float(totals[key])
    return None


def _fmt_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"


def _warp_geometry(spec: GpuSpec | CpuSpec | None) -> tuple[int, int]:
    if isinstance(spec, GpuSpec):
        return spec.registers_per_sm or 65536, spec.max_warps_per_sm or 64
    return 65536, 64


# ----- hints --------------------------------------------------------------------------------
def _profile_hints(totals: Mapping[str, float], spec: GpuSpec | CpuSpec | None, dtype: Any) -> list[str]:
    out: list[str] = []
    sm, mem, dram = _pct(totals, SM_PCT), _pct(totals, MEM_PCT), _pct(totals, DRAM_PCT, DRAM_PCT_ALT)
    if dram is not None and dram >= NEAR_CEILING_PCT:
        out.append(f"DRAM throughput {dram:.0f}% of peak: memory-bound, near ceiling; only moving fewer "
                   "bytes helps (fusion, reuse in shared memory, narrower types)")
    elif mem is not None and mem >= NEAR_CEILING_PCT:
        out.append(f"memory system {mem:.0f}% of peak but DRAM {dram or 0:.0f}%: L1/L2 or shared-memory "
                   "bound; check bank conflicts and cache reuse")
    if sm is not None and sm >= NEAR_CEILING_PCT:
        out.append(f"SM throughput {sm:.0f}% of peak: compute-bound, near ceiling; cut instructions "
                   "or move math to tensor cores")
    if sm is not None and mem is not None and max(sm, mem) < IDLE_PCT:
        out.append(f"SM {sm:.0f}% and memory {mem:.0f}% of peak: neither is busy, latency-bound; "
                   "expose more parallelism (more blocks, more work per thread) or fuse launches")
    regs = totals.get(REGISTERS)
    if isinstance(regs, int | float) and regs > 0:
        occ = occupancy_from_registers(regs, *_warp_geometry(spec))
        if occ < 0.5:
            out.append(f"registers {regs:.0f}/thread limit occupancy to {occ:.0%}")
    limits = {name: totals.get(f"launch__occupancy_limit_{name}") for name in OCC_LIMITS}
    known = {k: v for k, v in limits.items() if isinstance(v, int | float)}
    if known:
        tightest = min(known, key=lambda k: known[k])
        achieved, theoretical = _pct(totals, ACHIEVED_OCC), _pct(totals, THEORETICAL_OCC)
        if tightest in ("registers", "shared_mem") and theoretical is not None and theoretical < 100:
            out.append(f"occupancy limited by {tightest.replace('_', ' ')} ({known[tightest]:.0f} blocks/SM): "
                       f"theoretical {theoretical:.0f}%, achieved {achieved or 0:.0f}%")
    stalls = {name: _pct(totals, f"smsp__warp_issue_stalled_{name}_per_warp_active.pct") for name in STALLS}
    stalls = {k: v for k, v in stalls.items() if v is not None}
    if stalls:
        top = max(stalls, key=lambda k: stalls[k])
        if stalls[top] >= 20:
            out.append(f"main warp stall: {top} {stalls[top]:.0f}% ({STALLS[top]})")
    sectors = _pct(totals, SECTOR_USE)
    if sectors is not None and sectors < 60:
        out.append(f"global loads use {sectors:.0f}% of each 32-byte sector: uncoalesced or strided access")
    uniform = _pct(totals, BRANCH_UNIFORM)
    if uniform is not None and uniform < 90:
        out.append(f"branches {uniform:.0f}% uniform: warps diverge")
    tensor = _pct(totals, TENSOR_PIPE)
    if normalize_dtype(dtype) in ("bf16", "fp16", "fp8") and tensor is not None and tensor < 1 and (sm or 0) > 50:
        out.append("tensor pipes idle on a half-precision task: use mma/wgmma (tensor cores)")
    return out


def _compile_hints(record: CompileRecord, spec: GpuSpec | CpuSpec | None, dtype: Any, bound: str | None
                   ) -> list[str]:
    out: list[str] = []
    for res in record.resources:
        spills = (res.spill_store_bytes or 0) + (res.spill_load_bytes or 0)
        if spills:
            out.append(f"{res.name}: ptxas spills {res.spill_store_bytes or 0} B stores / "
                       f"{res.spill_load_bytes or 0} B loads to local memory; cut live registers")
        if res.registers:
            occ = occupancy_from_registers(res.registers, *_warp_geometry(spec))
            if occ < 0.5:
                out.append(f"{res.name}: registers {res.registers}/thread limit occupancy to {occ:.0%}")
    if record.sass_histogram:
        facts = summarize_sass(record.sass_histogram)
        if facts["local_memory"] and not any(r.spill_store_bytes for r in record.resources):
            out.append(f"local memory in SASS ({facts['local_memory_ops']} LDL/STL): a per-thread array "
                       "indexed at run time lives in slow local memory")
        if normalize_dtype(dtype) in ("bf16", "fp16", "fp8") and not facts["tensor_cores"] and bound != "memory-bound":
            out.append("no tensor-core instructions (HMMA/HGMMA) in SASS on a half-precision task")
        if bound == "memory-bound" and facts["global_loads"] and not facts["vectorized_loads"]:
            out.append("no vectorised global loads (LDG.E.64/128): load float4/uint4 per thread")
    return out


def hints(spec: GpuSpec | CpuSpec | None = None, roofline: RooflineRecord | None = None,
          profile: ProfileRecord | None = None, compile: CompileRecord | None = None,
          ceilings: Ceilings | None = None, measured_us: float | None = None, dtype: Any = None) -> list[str]:
    out: list[str] = []
    bound = roofline.label if roofline else None
    if roofline and roofline.sol_fraction is not None and roofline.sol_fraction > 1.0:
        out.append(f"measured time is {roofline.sol_fraction:.2f}x faster than the speed-of-light floor: "
                   "the measurement or the FLOP/byte counts are wrong")
    if profile and profile.available:
        out += _profile_hints(profile.totals, spec, dtype)
    if compile is not None:
        out += _compile_hints(compile, spec, dtype, bound)
    if not out and roofline and roofline.sol_fraction is not None and roofline.sol_fraction >= 0.9:
        out.append(f"at {roofline.sol_fraction:.0%} of speed of light: little left to gain")
    seen: set[str] = set()
    return [h for h in out if not (h in seen or seen.add(h))]


# ----- the compact block --------------------------------------------------------------------
def _spec_line(spec: GpuSpec | CpuSpec | None, ceilings: Ceilings | None, dtype: Any) -> str | None:
    if isinstance(spec, GpuSpec):
        parts = [f"{spec.sm_count} SMs" if spec.sm_count else None,
                 f"{spec.l2_bytes / 2**20:.0f} MiB L2" if spec.l2_bytes else None]
    elif isinstance(spec, CpuSpec):
        parts = [f"{spec.logical_cores} cores" if spec.logical_cores else None, "/".join(spec.flags) or None]
    else:
        parts = []
    name = spec.name if spec else (ceilings.device_name if ceilings else None)
    if name is None:
        return None
    bw = ceilings.memory_bandwidth_gbs if ceilings else getattr(spec, "memory_bandwidth_gbs", None)
    key = normalize_dtype(dtype) or "fp32"
    peak = ceilings.peak_tflops.get(key) if ceilings else getattr(spec, "peak_tflops", {}).get(key)
    if bw:
        parts.append(f"{bw:.0f} GB/s" + (f" ({ceilings.sources.get('bandwidth')})" if ceilings else ""))
    if peak:
        parts.append(f"{key} {peak:.3g} TFLOP/s" + (f" ({ceilings.sources.get(key)})" if ceilings else ""))
    return f"Device: {name} (" + ", ".join(p for p in parts if p) + ")"


def _roofline_line(roofline: RooflineRecord, measured_us: float | None) -> str:
    parts = [roofline.label]
    if roofline.floor_us is not None:
        parts.append(f"floor {roofline.floor_us:.3g} µs")
    if measured_us is not None:
        parts.append(f"measured {measured_us:.3g} µs")
    if roofline.sol_fraction is not None:
        parts.append(f"{roofline.sol_fraction:.0%} of speed of light")
    if roofline.arithmetic_intensity is not None:
        parts.append(f"{roofline.arithmetic_intensity:.3g} FLOP/B")
    return "Roofline: " + "; ".join(parts) + (f" [{roofline.ceilings_source}]" if roofline.ceilings_source else "")


def _compile_line(record: CompileRecord) -> str:
    kernels = [f"{r.name}: {r.registers} regs, {_fmt_bytes(r.shared_bytes)} smem, "
               f"{(r.spill_store_bytes or 0) + (r.spill_load_bytes or 0)} B spills"
               for r in record.resources[:PROMPT_KERNELS]]
    line = "Compiler: " + ("; ".join(kernels) if kernels else ("ok" if record.ok else "failed"))
    if record.sass_histogram:
        f = summarize_sass(record.sass_histogram)
        line += (f". SASS: tensor cores {'yes' if f['tensor_cores'] else 'no'}, 128-bit loads "
                 f"{'yes' if f['global_loads_128bit'] else 'no'}, local memory {'yes' if f['local_memory'] else 'no'}")
    return line


def _profile_lines(profile: ProfileRecord) -> list[str]:
    if not profile.available:
        return [f"Profile: unavailable ({profile.reason})"]
    t = profile.totals
    head = f"Profile ({profile.tool}, {int(t.get('kernels', len(profile.kernels)))} kernels"
    if "duration_us" in t:
        head += f", {t['duration_us']:.3g} µs"
    metrics = [(SM_PCT, "SM"), (MEM_PCT, "memory"), (DRAM_PCT, "DRAM"), (ACHIEVED_OCC, "occupancy"),
               (L1_HIT, "L1 hit"), (L2_HIT, "L2 hit"), (TENSOR_PIPE, "tensor pipe")]
    shown = [f"{label} {t[key]:.0f}%" for key, label in metrics if isinstance(t.get(key), int | float)]
    lines = [head + "): " + ", ".join(shown)]
    slow = sorted(profile.kernels, key=lambda k: -(k.get("gpu__time_duration.sum") or 0))[:PROMPT_KERNELS]
    for k in slow:
        dur = k.get("gpu__time_duration.sum")
        lines.append(f"  {str(k.get('name', '?'))[:80]}: {dur / 1e3:.3g} µs" if dur else f"  {k.get('name')}")
    return lines


def render_prompt(spec: GpuSpec | CpuSpec | None = None, roofline: RooflineRecord | None = None,
                  profile: ProfileRecord | None = None, compile: CompileRecord | None = None,
                  ceilings: Ceilings | None = None, measured_us: float | None = None, dtype: Any = None) -> str:
    lines = []
    if (line := _spec_line(spec, ceilings, dtype)) is not None:
        lines.append(line)
    if roofline is not None:
        lines.append(_roofline_line(roofline, measured_us))
    if compile is not None and (compile.resources or compile.sass_histogram):
        lines.append(_compile_line(compile))
    if profile is not None:
        lines += _profile_lines(profile)
    found = hints(spec, roofline, profile, compile, ceilings, measured_us, dtype)[:MAX_HINTS]
    if found:
        lines.append("Hints:")
        lines += [f"- {h}" for h in found]
    return "\n".join(lines)


# ----- Markdown -----------------------------------------------------------------------------
def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join("" if c is None else str(c) for c in row) + " |" for row in rows]
    return out


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return "" if value is None else str(value)


def render_markdown(spec: GpuSpec | CpuSpec | None = None, roofline: RooflineRecord | None = None,
                    profile: ProfileRecord | None = None, compile: CompileRecord | None = None,
                    ceilings: Ceilings | None = None, measured_us: float | None = None, dtype: Any = None) -> str:
    out: list[str] = ["## Hardware feedback", ""]

    def section(title: str, *blocks: list[str]) -> None:
        out.extend([f"### {title}", ""])
        for block in blocks:
            out.extend([*block, ""])

    if spec is not None:
        section("Device", _table(["field", "value"], [(k, _num(v)) for k, v in spec.to_dict().items()]))
    if ceilings is not None:
        rows = [("bandwidth GB/s", _num(ceilings.memory_bandwidth_gbs), ceilings.sources.get("bandwidth", ""))]
        rows += [(f"{k} TFLOP/s", _num(v), ceilings.sources.get(k, "")) for k, v in ceilings.peak_tflops.items()]
        section("Ceilings", _table(["ceiling", "value", "source"], rows))
    if roofline is not None:
        rows = [("label", roofline.label), ("FLOPs", _num(roofline.flops)), ("bytes", _num(roofline.bytes)),
                ("floor µs", _num(roofline.floor_us)), ("measured µs", _num(measured_us)),
                ("SoL fraction", _num(roofline.sol_fraction)),
                ("arithmetic intensity FLOP/B", _num(roofline.arithmetic_intensity)),
                ("ceilings", roofline.ceilings_source)]
        section("Roofline", _table(["", ""], rows))
    if compile is not None:
        section("Compiler", *_compile_blocks(compile))
    if profile is not None:
        section("Profile", *_profile_blocks(profile))
    found = hints(spec, roofline, profile, compile, ceilings, measured_us, dtype)
    if found:
        section("Hints", [f"- {h}" for h in found])
    return "\n".join(out)


def _compile_blocks(compile: CompileRecord) -> list[list[str]]:
    rows = [(r.name, r.registers, r.shared_bytes, r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes)
            for r in compile.resources]
    blocks = [_table(["kernel", "registers", "smem B", "stack B", "spill st B", "spill ld B"], rows)]
    if compile.sass_histogram:
        top = sorted(compile.sass_histogram.items(), key=lambda kv: -kv[1])[:15]
        facts = summarize_sass(compile.sass_histogram)
        blocks += [["SASS: " + ", ".join(f"{k}={v}" for k, v in facts.items())], _table(["opcode", "count"], top)]
    return blocks


def _profile_blocks(profile: ProfileRecord) -> list[list[str]]:
    if not profile.available:
        return [[f"Unavailable: {profile.reason}"]]
    totals = _table(["metric", "total"], [(k, _num(v)) for k, v in sorted(profile.totals.items())])
    keys = [SM_PCT, MEM_PCT, DRAM_PCT, ACHIEVED_OCC, REGISTERS, "gpu__time_duration.sum"]
    rows = [[str(k.get("name", "?"))[:60]] + [_num(k.get(m)) for m in keys] for k in profile.kernels]
    return [totals, _table(["kernel", "SM %", "memory %", "DRAM %", "occupancy %", "regs", "ns"], rows)]
