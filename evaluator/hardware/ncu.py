"""Nsight Compute: profile exactly the candidate's kernels and boil them down to ~25 metrics.

Call these:

- `profile_script(script, args=(), options=NcuOptions(), python=sys.executable, cwd=None)
  -> ProfileRecord`: run `ncu ... python script args` and parse its `--csv --page raw` output.
  The profiled program must wrap the candidate's call in an NVTX push/pop range named
  `NVTX_RANGE` ("agentforge_candidate", e.g. `torch.cuda.nvtx.range_push(NVTX_RANGE)` ...
  `range_pop()`), so that only its kernels are profiled: warm-up, reference and input
  generation kernels are outside the range. Never raises: when ncu cannot profile, the record
  is `available=False` with a `reason` (no ncu binary, no GPU, no permission for counters
  (ERR_NVGPUCTRPERM), timeout, non-zero exit, no kernel in the range).
- `profile_command(command, options, cwd=None) -> ProfileRecord`: the same for any command line.
- `build_command(target, options, ncu="ncu") -> list[str]`: the ncu command line alone.
- `parse_raw_csv(text) -> list[dict]` and `summarize(kernels) -> dict[str, float]`: the parser,
  usable on a saved export (`ncu --import x.ncu-rep --csv --page raw --print-units base`).

Per kernel, a dict holds `name` (demangled), `id`, `block_size`, `grid_size`, `device`, `cc` and
each metric in base units (ns, bytes, bytes/s, %). Totals: percentages and rates weighted by
duration; registers and shared memory per block the maximum over kernels; occupancy limits the
minimum; every other metric (durations, bytes, instructions, cycles) summed; `dram__bytes.sum`
added as read + write and `dram__bytes.sum.per_second` recomputed as total bytes / total time;
plus `kernels` (the count) and `duration_us`.
"""

from __future__ import annotations

import contextlib
import csv
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agentforge.evaluator.result import ProfileRecord

NVTX_RANGE = "agentforge_candidate"

# The judge's metrics: CudaForge's curated set plus KernelAgent's speed-of-light additions.
# Giving a judge every metric made it worse and dearer; add here only what a hint uses.
CURATED_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    # speed of light
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
    # occupancy and what limits it
    "sm__cycles_active.avg",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_blocks",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_allocated",
    # instructions and pipes
    "sm__inst_executed.sum",
    "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    # DRAM
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    # caches
    "l1tex__t_sector_hit_rate.pct",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__t_sector_hit_rate.pct",
    "lts__throughput.avg.pct_of_peak_sustained_active",
    # warp stalls
    # (nvprof's stall_memory_dependency is long_scoreboard since Volta; the name
    # smsp__warp_issue_stalled_memory_dependency_... does not exist there and failed every run.)
    "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
    "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
    "smsp__warp_issue_stalled_branch_resolving_per_warp_active.pct",
    # divergence and coalescing
    "smsp__sass_average_branch_targets_threads_uniform.pct",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
)

DURATION = "gpu__time_duration.sum"
DRAM_BYTES = "dram__bytes.sum"  # added to totals: read + write

_ID_COLUMNS = {"ID": "id", "Kernel Name": "name", "Block Size": "block_size", "Grid Size": "grid_size",
               "Device": "device", "CC": "cc"}

_SCALE = {
    "nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9,
    "byte": 1.0, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
    "byte/second": 1.0, "kbyte/second": 1e3, "mbyte/second": 1e6, "gbyte/second": 1e9, "tbyte/second": 1e12,
    "byte/s": 1.0, "kbyte/s": 1e3, "mbyte/s": 1e6, "gbyte/s": 1e9, "tbyte/s": 1e12,
    "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9,
}

PERMISSION_ERROR = "ERR_NVGPUCTRPERM"
MAX_METRIC_RETRIES = 6  # each retry runs the program again under ncu


@dataclass(frozen=True)
class NcuOptions:
    """How to run ncu. The defaults profile every kernel inside the NVTX range, clocks unlocked."""

    ncu_path: str | None = None  # the ncu binary; else found on search_path, then in known installs
    search_path: str | None = None  # PATH-style folders to look for ncu in (None: the process PATH)
    env: Mapping[str, str] | None = None  # environment of ncu and the profiled program (None: inherit)
    metrics: tuple[str, ...] = CURATED_METRICS
    nvtx_range: str | None = NVTX_RANGE  # None: no NVTX filter
    kernel_regex: str | None = None  # --kernel-name regex:<this>, matched on kernel_name_base
    kernel_name_base: str = "demangled"  # function | demangled | mangled
    launch_skip: int = 0
    launch_count: int | None = None
    clock_control: str = "none"  # none: the clocks the timing ran at; base: locked to base clock
    cache_control: str = "all"  # flush caches before each replay, like the timed runs
    replay_mode: str = "kernel"
    timeout_s: float = 600.0
    cuda_available: bool | None = None  # None: ask torch
    extra_args: tuple[str, ...] = field(default_factory=tuple)
    query_metrics: bool = True  # ask `ncu --query-metrics` first and drop what this GPU lacks


# ----- finding and building -----------------------------------------------------------------
_KNOWN_INSTALLS = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda-*/bin/ncu",
                   "/usr/local/NVIDIA-Nsight-Compute*/ncu", "/usr/local/cuda/nsight-compute-*/ncu")


def find_ncu(ncu_path: str | None = None, search_path: str | None = None) -> str | None:
    """The ncu binary: `ncu_path` if executable, else `ncu` on `search_path` (or the process
    PATH when None), else the newest of the usual install folders. With an explicit
    `search_path`, only it is searched, so tests can hide or fake ncu."""
    if ncu_path:
        return ncu_path if Path(ncu_path).is_file() else None
    found = shutil.which("ncu", path=search_path)
    if found or search_path is not None:
        return found
    for pattern in _KNOWN_INSTALLS:
        matches = sorted(Path("/").glob(pattern.lstrip("/")), reverse=True)
        for match in matches:
            if match.is_file():
                return str(match)
    return None


def build_command(target: Sequence[str], options: NcuOptions = NcuOptions(), ncu: str = "ncu") -> list[str]:
    cmd = [ncu, "--csv", "--page", "raw", "--print-units", "base",
           "--target-processes", "all",
           "--clock-control", options.clock_control,
           "--cache-control", options.cache_control,
           "--replay-mode", options.replay_mode,
           "--kernel-name-base", options.kernel_name_base]
    if options.nvtx_range:
        # A trailing "/" selects push/pop ranges (torch.cuda.nvtx.range_push), not start/end ones.
        cmd += ["--nvtx", "--nvtx-include", f"{options.nvtx_range}/"]
    if options.kernel_regex:
        cmd += ["--kernel-name", f"regex:{options.kernel_regex}"]
    if options.launch_skip:
        cmd += ["--launch-skip", str(options.launch_skip)]
    if options.launch_count is not None:
        cmd += ["--launch-count", str(options.launch_count)]
    if options.metrics:
        cmd += ["--metrics", ",".join(options.metrics)]
    return [*cmd, *options.extra_args, *target]


# ----- running ------------------------------------------------------------------------------
def profile_script(
    script: str | Path,
    args: Sequence[str] = (),
    options: NcuOptions = NcuOptions(),
    python: str = sys.executable,
    cwd: str | Path | None = None,
) -> ProfileRecord:
    return profile_command([python, str(script), *args], options, cwd)


def profile_command(command: Sequence[str], options: NcuOptions = NcuOptions(),
                    cwd: str | Path | None = None) -> ProfileRecord:
    ncu = find_ncu(options.ncu_path, options.search_path)
    if ncu is None:
        where = options.ncu_path or f"PATH={options.search_path or '<process PATH>'}"
        return _unavailable(f"Nsight Compute (ncu) not found ({where}); install it to get profiles")
    cuda = options.cuda_available if options.cuda_available is not None else _cuda_available()
    if not cuda:
        return _unavailable("no CUDA GPU visible: nothing for Nsight Compute to profile")
    if os.geteuid() != 0 and profiling_restricted():  # ncu would only find out after the whole warm-up
        return _unavailable(f"{PERMISSION_ERROR}: the driver lets only admin users read GPU performance "
                            "counters (RmProfilingAdminOnly: 1) and this process is not root; load the driver "
                            "with NVreg_RestrictProfilingToAdminUsers=0 to get profiles; timing-only feedback")
    if not loopback_works():
        return _unavailable("ncu talks to the profiled process over a loopback TCP port, and loopback is down "
                            "here (a network namespace without 'lo' up, as under the sandbox's `unshare` "
                            "isolation): use bwrap isolation, which brings loopback up, to get profiles")
    if options.query_metrics and options.metrics:
        kept, _ = prune_metrics(options.metrics, query_metrics(ncu, min(options.timeout_s, QUERY_TIMEOUT_S)))
        options = replace(options, metrics=kept or options.metrics)
    record, output = _run(ncu, command, options, cwd)
    for _ in range(MAX_METRIC_RETRIES):  # an architecture without some metric: drop it, run again
        unknown = unknown_metrics(output, options.metrics) if not record.available else set()
        kept = tuple(m for m in options.metrics if m not in unknown)
        if not unknown or not kept:
            break
        options = replace(options, metrics=kept)
        record, output = _run(ncu, command, options, cwd)
    return record


# ----- which metrics this GPU has --------------------------------------------------------------
# `ncu --query-metrics` lists the device's base metric names (no rollup suffix). Asked once per ncu
# binary and process, it costs a second or two; each unknown metric found by a profile instead
# costs a whole rerun of the profiled program (MAX_METRIC_RETRIES).
QUERY_TIMEOUT_S = 60.0
_QUERIED: dict[str, frozenset[str] | None] = {}
_METRIC_NAME = re.compile(r'^"?([a-z][a-z0-9]*__[A-Za-z0-9_]+)"?(?:[\s,]|$)')


def parse_query_metrics(text: str) -> frozenset[str]:
    """Base metric names in `ncu --query-metrics` output (a table or CSV of name, description);
    banner, header and ruler lines are skipped."""
    return frozenset(m.group(1) for line in text.splitlines() if (m := _METRIC_NAME.match(line.strip())))


def query_metrics(ncu: str, timeout_s: float = QUERY_TIMEOUT_S) -> frozenset[str] | None:
    """The base metric names the GPU at hand offers, or None when ncu could not say."""
    if ncu not in _QUERIED:
        try:
            proc = subprocess.run([ncu, "--query-metrics"], capture_output=True, text=True, timeout=timeout_s,
                                  check=False)
            names = parse_query_metrics(proc.stdout) if proc.returncode == 0 else frozenset()
        except (OSError, subprocess.SubprocessError):
            names = frozenset()
        _QUERIED[ncu] = names if len(names) >= 20 else None  # a few names: not a listing to prune by
    return _QUERIED[ncu]


def prune_metrics(metrics: Sequence[str], available: frozenset[str] | None,
                  ) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(kept, dropped): a metric is dropped when the listing has its unit (`sm__`, `dram__`, ...)
    but not its base name; a unit the listing lacks entirely (`launch__`) is kept for ncu to judge."""
    if not available:
        return tuple(metrics), ()
    units = {name.split("__", 1)[0] for name in available}
    dropped = tuple(m for m in metrics
                    if m.split(".", 1)[0] not in available and m.split("__", 1)[0] in units)
    return tuple(m for m in metrics if m not in dropped), dropped


def _run(ncu: str, command: Sequence[str], options: NcuOptions,
         cwd: str | Path | None) -> tuple[ProfileRecord, str]:
    """The record of one ncu run, and ncu's whole output (the retry reads errors from all of it,
    not from the record's tail: the profiled program may print after ncu's error)."""
    cmd = build_command(command, options, ncu)
    try:  # a session of its own: a timeout ends ncu and the program it profiles, not ncu alone
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                                env=dict(options.env) if options.env is not None else None, start_new_session=True)
    except OSError as exc:
        return _unavailable(f"ncu could not be started: {exc}"), ""
    try:
        stdout, stderr = proc.communicate(timeout=options.timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return _unavailable(f"ncu timed out after {options.timeout_s:g} s"), ""
    output = stdout + "\n" + stderr
    return _record(proc.returncode, stdout, output, options), output


def _record(returncode: int, stdout: str, output: str, options: NcuOptions) -> ProfileRecord:
    if PERMISSION_ERROR in output:
        return _unavailable(f"{PERMISSION_ERROR}: no permission to read GPU performance counters "
                            "(profiling needs NVreg_RestrictProfilingToAdminUsers=0 or admin rights); "
                            "timing-only feedback")
    if returncode != 0:
        return _unavailable(f"ncu exited with {returncode}: {_tail(output)}")
    try:
        kernels = parse_raw_csv(stdout)
    except ValueError as exc:
        return _unavailable(f"ncu output not understood: {exc}; {_tail(output)}")
    if not kernels:
        scope = f"NVTX range '{options.nvtx_range}'" if options.nvtx_range else "the filters"
        return _unavailable(f"ncu profiled no kernel in {scope}: {_tail(output)}")
    return ProfileRecord(available=True, tool="ncu", kernels=tuple(kernels), totals=summarize(kernels))


def loopback_works(timeout_s: float = 1.0) -> bool:
    """Whether a TCP connection to 127.0.0.1 can be made in this network namespace."""
    try:
        with socket.socket() as server, socket.socket() as client:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            client.settimeout(timeout_s)
            client.connect(server.getsockname())
        return True
    except OSError:
        return False


def profiling_restricted(params: str = "/proc/driver/nvidia/params") -> bool | None:
    """True when the driver lets only admin users read GPU performance counters
    (`RmProfilingAdminOnly: 1`, the module option NVreg_RestrictProfilingToAdminUsers), False when
    anyone may, None when the driver does not say (no NVIDIA driver here)."""
    try:
        text = Path(params).read_text()
    except OSError:
        return None
    found = re.search(r"^RmProfilingAdminOnly:\s*(\d+)", text, re.MULTILINE)
    return None if found is None else found.group(1) != "0"


def _unavailable(reason: str) -> ProfileRecord:
    return ProfileRecord(available=False, reason=reason, tool="ncu")


def _tail(text: str, lines: int = 6, chars: int = 800) -> str:
    kept = [ln for ln in text.strip().splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)[-chars:]


# ncu 2019.4+ prints `==ERROR== Failed to find metric regex:^NAME\.(sum|min|max|avg|pct|ratio|max_rate)$`
# for a name without a rollup (and the regex of the full name otherwise); older builds printed the name.
_FAILED_METRIC = re.compile(r"Failed to find metric\s+(\S+)")
_BASE = re.compile(r"[A-Za-z0-9_]+")


def unknown_metrics(output: str, requested: Sequence[str]) -> set[str]:
    """The requested metrics that ncu's output says this GPU or ncu does not have. Each error
    names a regex (or a name); a requested metric it matches whole is unknown, else every
    requested metric with the same base name (the part before the first dot) is."""
    unknown: set[str] = set()
    for spec in _FAILED_METRIC.findall(output):
        unknown |= _matching(spec.strip("'\"`,;"), requested)
    return unknown


def _matching(spec: str, requested: Sequence[str]) -> set[str]:
    pattern = spec.removeprefix("regex:")
    regex = None
    if spec.startswith("regex:"):
        try:
            regex = re.compile(pattern)
        except re.error:
            regex = None
    whole = {m for m in requested if (regex.fullmatch(m) if regex is not None else m == pattern)}
    if whole:
        return whole
    base = _BASE.match(pattern.lstrip("^"))
    if base is None:
        return set()
    return {m for m in requested if m.split(".", 1)[0] == base.group(0)}


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# ----- parsing ------------------------------------------------------------------------------
def parse_number(text: str) -> float | None:
    """ncu's numbers: "1,234.5" (thousands separators), "42", "n/a" / "" -> None."""
    cleaned = text.strip().replace(",", "")
    if not cleaned:
        return None
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None  # "nan", "inf": no figure (and no JSON)


def _scale(unit: str) -> float:
    return _SCALE.get(unit.strip().lower(), 1.0)


def parse_raw_csv(text: str) -> list[dict[str, Any]]:
    """One dict per profiled kernel launch from `ncu --csv --page raw` output.

    The output may carry ncu's `==PROF==` / `==WARNING==` lines and the program's own output
    around the table; the table starts at the header row ("ID", ..., "Kernel Name", metric
    names), may have a units row (its ID cell empty), then one row per launch. Values are
    converted to base units (ns, bytes, bytes/s) when the units row says otherwise. Returns []
    when there is no table (nothing was profiled); raises ValueError on a malformed one."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"') and '"Kernel Name"' in ln), None)
    if start is None:
        return []
    table = [ln for ln in lines[start:] if ln.startswith('"')]
    rows = list(csv.reader(table))
    header = rows[0]
    units: list[str] = [""] * len(header)
    body = rows[1:]
    if body and body[0] and body[0][0] == "":
        units, body = body[0], body[1:]
    kernels = []
    for row in body:
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells, the header {len(header)}")
        kernels.append(_kernel(header, units, row))
    return kernels


def _kernel(header: list[str], units: list[str], row: list[str]) -> dict[str, Any]:
    kernel: dict[str, Any] = {}
    for column, unit, cell in zip(header, units, row, strict=True):
        if column in _ID_COLUMNS:
            key = _ID_COLUMNS[column]
            kernel[key] = int(parse_number(cell) or 0) if key == "id" else cell
        elif "__" in column:  # a metric (ncu's names are <unit>__<counter>)
            value = parse_number(cell)
            kernel[column] = value * _scale(unit) if value is not None else (cell.strip() or None)
    return kernel


def _is_pct(metric: str) -> bool:
    return metric.endswith(".pct") or ".pct_of_peak" in metric or metric.endswith("_pct")


def summarize(kernels: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Totals over kernels, by the rules of the module docstring."""
    durations = [k.get(DURATION) if isinstance(k.get(DURATION), float) else 0.0 for k in kernels]
    total_ns = sum(durations)
    totals: dict[str, float] = {"kernels": float(len(kernels))}
    if total_ns:
        totals[DURATION] = total_ns
        totals["duration_us"] = total_ns / 1e3
    metrics = sorted({m for k in kernels for m in k if "__" in m and m != DURATION})
    for metric in metrics:
        pairs = [(k[metric], d) for k, d in zip(kernels, durations, strict=True)
                 if isinstance(k.get(metric), float)]
        if not pairs:
            continue
        values = [v for v, _ in pairs]
        if metric.startswith("launch__occupancy_limit"):
            totals[metric] = min(values)
        elif metric.startswith(("launch__registers", "launch__shared_mem")):
            totals[metric] = max(values)
        elif _is_pct(metric) or metric.endswith(".per_second"):
            weight = sum(d for _, d in pairs)
            totals[metric] = sum(v * d for v, d in pairs) / weight if weight else sum(values) / len(values)
        else:
            totals[metric] = sum(values)
    if "dram__bytes_read.sum" in totals or "dram__bytes_write.sum" in totals:
        read, write = totals.get("dram__bytes_read.sum", 0.0), totals.get("dram__bytes_write.sum", 0.0)
        totals[DRAM_BYTES] = read + write
        if total_ns:
            totals["dram__bytes.sum.per_second"] = totals[DRAM_BYTES] / (total_ns * 1e-9)
    return totals
