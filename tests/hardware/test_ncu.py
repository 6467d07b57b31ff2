"""Nsight Compute: the raw-CSV parser on (synthetic) fixtures, the command line, and every
unavailable path, driven through fake `ncu` executables."""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path

import pytest
from agentforge.evaluator.hardware import ncu

FIXTURES = Path(__file__).parent / "fixtures"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


# ----- parsing ------------------------------------------------------------------------------
def test_parse_two_kernels_with_thousands_separators() -> None:
    kernels = ncu.parse_raw_csv(_read("raw_two_kernels.csv"))
    assert [k["id"] for k in kernels] == [0, 1]
    first, second = kernels
    assert first["name"] == "void elementwise_kernel<float>(float const*, float*, int)"
    assert first["block_size"] == "(256, 1, 1)" and first["cc"] == "9.0"
    assert first["gpu__time_duration.sum"] == 10240.0
    assert first["dram__bytes_read.sum"] == 33554432.0
    assert first["dram__bytes.sum.per_second"] == pytest.approx(6.5536e12)
    assert second["launch__registers_per_thread"] == 128.0
    assert second["launch__shared_mem_per_block_allocated"] == 49152.0
    assert "Process Name" not in first and "Host Name" not in first


def test_totals_by_hand() -> None:
    totals = ncu.summarize(ncu.parse_raw_csv(_read("raw_two_kernels.csv")))
    assert totals["kernels"] == 2
    assert totals["gpu__time_duration.sum"] == 40960.0 and totals["duration_us"] == pytest.approx(40.96)
    # bytes summed: 2 x 32 MiB + 4 MiB + 1 MiB
    assert totals["dram__bytes.sum"] == 72351744.0
    assert totals["dram__bytes.sum.per_second"] == pytest.approx(72351744 / 40960e-9)
    # percentages weighted by duration: (85.5 x 10240 + 20.5 x 30720) / 40960
    assert totals["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(36.75)
    assert totals["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(61.25)
    assert totals["launch__registers_per_thread"] == 128.0  # max
    assert totals["launch__occupancy_limit_registers"] == 2.0  # min
    assert totals["sm__inst_executed.sum"] == 1048576 + 8388608  # sum


def test_default_units_are_scaled_to_base_units() -> None:
    (kernel,) = ncu.parse_raw_csv(_read("raw_auto_units.csv"))
    assert kernel["gpu__time_duration.sum"] == pytest.approx(792_500.0)  # 792.5 usecond
    assert kernel["dram__bytes_read.sum"] == pytest.approx(1.07374e9)  # 1,073.74 Mbyte
    assert kernel["dram__bytes_write.sum"] == pytest.approx(1.07374182e9)  # 1,073,741.82 Kbyte
    assert kernel["dram__bytes.sum.per_second"] == pytest.approx(2.71e12)  # Tbyte/second
    assert kernel["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == pytest.approx(12.4)
    assert kernel["grid_size"] == "(1,024, 1, 1)"


def test_no_table_means_no_kernels_and_a_broken_table_is_an_error() -> None:
    assert ncu.parse_raw_csv(_read("no_kernels.txt")) == []
    assert ncu.parse_raw_csv(_read("perm_error.txt")) == []
    broken = '"ID","Kernel Name","gpu__time_duration.sum"\n"","","nsecond"\n"0","k","1","extra"\n'
    with pytest.raises(ValueError, match="cells"):
        ncu.parse_raw_csv(broken)


@pytest.mark.parametrize(("text", "value"), [("1,234.5", 1234.5), ("42", 42.0), (" 7.25 ", 7.25),
                                             ("n/a", None), ("", None), ("1,000,000", 1e6),
                                             ("nan", None), ("-nan", None), ("inf", None), ("-inf", None)])
def test_parse_number(text: str, value: float | None) -> None:
    assert ncu.parse_number(text) == value


# ----- the command line ---------------------------------------------------------------------
def test_command_profiles_only_the_nvtx_range() -> None:
    cmd = ncu.build_command(["python", "bench.py", "--shape", "default"], ncu.NcuOptions(), ncu="/opt/ncu")
    assert cmd[0] == "/opt/ncu" and cmd[-3:] == ["bench.py", "--shape", "default"]
    joined = " ".join(cmd)
    assert "--csv --page raw --print-units base" in joined
    assert "--clock-control none" in joined
    assert "--nvtx --nvtx-include agentforge_candidate/" in joined
    metrics = cmd[cmd.index("--metrics") + 1].split(",")
    assert metrics == list(ncu.CURATED_METRICS)
    assert "--kernel-name" not in cmd and "--launch-skip" not in cmd


def test_command_kernel_filters() -> None:
    options = ncu.NcuOptions(nvtx_range=None, kernel_regex="my_kernel.*", launch_skip=3, launch_count=1,
                             kernel_name_base="function", clock_control="base")
    cmd = ncu.build_command(["python", "x.py"], options)
    joined = " ".join(cmd)
    assert "--nvtx" not in cmd
    assert "--kernel-name regex:my_kernel.*" in joined and "--kernel-name-base function" in joined
    assert "--launch-skip 3" in joined and "--launch-count 1" in joined and "--clock-control base" in joined


def test_curated_metrics_cover_the_speed_of_light_and_the_judges_list() -> None:
    for metric in ("sm__throughput.avg.pct_of_peak_sustained_elapsed",
                   "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",
                   "launch__occupancy_limit_registers", "launch__registers_per_thread",
                   "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_sector_hit_rate.pct",
                   "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
                   "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
                   "smsp__sass_average_branch_targets_threads_uniform.pct",
                   "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct"):
        assert metric in ncu.CURATED_METRICS
    assert len(set(ncu.CURATED_METRICS)) == len(ncu.CURATED_METRICS)


# ----- running, through fake ncu executables ------------------------------------------------
def _fake_ncu(folder: Path, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ncu"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def _options(folder: Path, **kw) -> ncu.NcuOptions:
    kw.setdefault("cuda_available", True)
    kw.setdefault("query_metrics", False)  # these fakes answer the profile only; the query has its own tests
    return ncu.NcuOptions(search_path=str(folder), **kw)


def test_no_ncu_on_the_path(tmp_path) -> None:
    record = ncu.profile_script("bench.py", options=_options(tmp_path / "empty"))
    assert not record.available and "not found" in record.reason and record.tool == "ncu"
    record = ncu.profile_script("bench.py", options=ncu.NcuOptions(ncu_path=str(tmp_path / "nope")))
    assert not record.available and "not found" in record.reason


def test_no_gpu(tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    _fake_ncu(bin_dir, "exit 0")
    record = ncu.profile_script("bench.py", options=_options(bin_dir, cuda_available=False))
    assert not record.available and "no CUDA GPU" in record.reason


@pytest.mark.parametrize("exit_code", [0, 1])
def test_counter_permission_error(tmp_path, exit_code: int) -> None:
    bin_dir = tmp_path / "bin"
    _fake_ncu(bin_dir, f"cat '{FIXTURES / 'perm_error.txt'}'\nexit {exit_code}")
    record = ncu.profile_script("bench.py", options=_options(bin_dir))
    assert not record.available
    assert record.reason.startswith("ERR_NVGPUCTRPERM") and "timing-only" in record.reason


def test_timeout(tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    _fake_ncu(bin_dir, "exec sleep 5")
    record = ncu.profile_script("bench.py", options=_options(bin_dir, timeout_s=0.5))
    assert not record.available and "timed out after 0.5 s" in record.reason


def test_a_timeout_ends_the_profiled_program_too(tmp_path) -> None:
    """ncu's child (the profiled program) must not outlive a timeout, holding the GPU."""
    bin_dir, pid_file = tmp_path / "bin", tmp_path / "child.pid"
    _fake_ncu(bin_dir, f'sleep 30 &\necho $! > "{pid_file}"\nwait')
    record = ncu.profile_script("bench.py", options=_options(bin_dir, timeout_s=1.0))
    assert not record.available and "timed out" in record.reason
    child = int(pid_file.read_text())
    for _ in range(50):
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the profiled program (pid {child}) outlived ncu's timeout")


def test_counters_restricted_to_admins_are_said_without_running_ncu(tmp_path, monkeypatch) -> None:
    """The sandbox's uid 65534 under a driver with RmProfilingAdminOnly: 1 would only learn it from
    ncu after the profiled program's whole start-up and warm-up."""
    bin_dir, ran = tmp_path / "bin", tmp_path / "ran"
    _fake_ncu(bin_dir, f'touch "{ran}"')
    monkeypatch.setattr(ncu, "profiling_restricted", lambda *a: True)
    monkeypatch.setattr(ncu.os, "geteuid", lambda: 65534)
    record = ncu.profile_script("bench.py", options=_options(bin_dir))
    assert not record.available and record.reason.startswith("ERR_NVGPUCTRPERM") and not ran.exists()
    monkeypatch.setattr(ncu.os, "geteuid", lambda: 0)  # root reads counters whatever the switch says
    ncu.profile_script("bench.py", options=_options(bin_dir))
    assert ran.exists()


def test_nonzero_exit_keeps_the_tail(tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    _fake_ncu(bin_dir, "echo 'Traceback: boom in candidate' >&2\nexit 3")
    record = ncu.profile_script("bench.py", options=_options(bin_dir))
    assert not record.available and "exited with 3" in record.reason and "boom in candidate" in record.reason


def test_nothing_in_the_range(tmp_path) -> None:
    bin_dir = tmp_path / "bin"
    _fake_ncu(bin_dir, f"cat '{FIXTURES / 'no_kernels.txt'}'")
    record = ncu.profile_script("bench.py", options=_options(bin_dir))
    assert not record.available and "no kernel in NVTX range 'agentforge_candidate'" in record.reason


def test_success_end_to_end(tmp_path) -> None:
    bin_dir, args_file = tmp_path / "bin", tmp_path / "args.txt"
    _fake_ncu(bin_dir, f'printf "%s\\n" "$@" > "{args_file}"\necho "mark=$AF_MARK" >> "{args_file}"\n'
                       f"cat '{FIXTURES / 'raw_two_kernels.csv'}'")
    env = {"PATH": os.defpath, "AF_MARK": "from-options"}
    record = ncu.profile_script("/work/bench.py", ["--seed", "7"], options=_options(bin_dir, env=env),
                                python="/usr/bin/python3")
    assert record.available and record.reason == ""
    assert len(record.kernels) == 2 and record.totals["dram__bytes.sum"] == 72351744.0
    argv = args_file.read_text().splitlines()
    assert argv[-5:] == ["/usr/bin/python3", "/work/bench.py", "--seed", "7", "mark=from-options"]
    assert "agentforge_candidate/" in argv


def test_metric_unknown_to_the_gpu_is_dropped_and_retried(tmp_path) -> None:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    missing = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
    fail = f'echo "==ERROR== Failed to find metric {missing}" >&2; exit 1'
    _fake_ncu(bin_dir, f'echo call >> "{calls}"\n'
                       f'case "$*" in *{missing}*) {fail};; esac\n'
                       f"cat '{FIXTURES / 'raw_two_kernels.csv'}'")
    record = ncu.profile_script("bench.py", options=_options(bin_dir))
    assert record.available and calls.read_text().count("call") == 2


def test_metrics_reported_one_at_a_time_are_all_dropped(tmp_path) -> None:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    first, second = "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "sm__maximum_warps_per_active_cycle_pct"
    _fake_ncu(bin_dir, f'echo call >> "{calls}"\n'
                       f'case "$*" in *{first}*) echo "==ERROR== Failed to find metric {first}"; exit 1;; esac\n'
                       f'case "$*" in *{second}*) echo "==ERROR== Failed to find metric {second}"; exit 1;; esac\n'
                       f"cat '{FIXTURES / 'raw_two_kernels.csv'}'")
    record = ncu.profile_script("bench.py", options=_options(bin_dir))
    assert record.available and calls.read_text().count("call") == 3


def test_a_failure_that_names_no_metric_is_not_retried(tmp_path) -> None:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    _fake_ncu(bin_dir, f'echo call >> "{calls}"\necho "==ERROR== Failed to find metric bogus__x.sum"; exit 1')
    record = ncu.profile_script("bench.py", options=_options(bin_dir))
    assert not record.available and "Failed to find metric bogus__x.sum" in record.reason
    assert calls.read_text().count("call") == 1


def test_record_round_trips_through_json(tmp_path) -> None:
    from agentforge.evaluator.result import ProfileRecord, from_json, to_json

    bin_dir = tmp_path / "bin"
    _fake_ncu(bin_dir, f"cat '{FIXTURES / 'raw_two_kernels.csv'}'")
    record = ncu.profile_script("bench.py", options=_options(bin_dir))
    assert from_json(ProfileRecord, to_json(record)) == record


# ----- a real profile -----------------------------------------------------------------------
ELEMENTWISE = """
import torch
n = {n}
x = torch.randn(n, device="cuda")
y = torch.empty_like(x)
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("agentforge_candidate")
torch.mul(x, 2.0, out=y)
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
"""


@pytest.mark.gpu
def test_real_profile_counts_the_bytes_an_elementwise_kernel_must_move(tmp_path) -> None:
    if ncu.find_ncu() is None:
        pytest.skip("ncu is not installed on this GPU machine")
    # 1 GiB read + 1 GiB written: what a 50-126 MB L2 still holds dirty at the end is within 10 %
    n = 256 * 1024 * 1024
    script = tmp_path / "elementwise.py"
    script.write_text(ELEMENTWISE.format(n=n))
    record = ncu.profile_script(script, python=sys.executable, options=ncu.NcuOptions(timeout_s=300))
    if not record.available and "ERR_NVGPUCTRPERM" in record.reason:
        pytest.skip(record.reason)
    assert record.available, record.reason
    assert record.totals["kernels"] == 1
    assert record.totals["dram__bytes.sum"] == pytest.approx(2 * 4 * n, rel=0.10)
    assert record.totals["gpu__time_duration.sum"] > 0


# ----- unknown metrics, in the form real ncu prints them ---------------------------------------
REAL_UNKNOWN = (FIXTURES / "unknown_metric_real.txt").read_text()


def test_real_unknown_metric_lines_name_the_requested_metrics_by_base_name() -> None:
    requested = ("flop_count_sp", "l1tex__hit_rate.pct", "l1tex__t_sector_hit_rate.pct", "dram__bytes_read.sum")
    assert ncu.unknown_metrics(REAL_UNKNOWN, requested) == {"flop_count_sp", "l1tex__hit_rate.pct"}


def test_a_full_name_regex_drops_only_that_metric() -> None:
    line = r"==ERROR== Failed to find metric regex:^sm__throughput\.avg\.pct_of_peak_sustained_active$"
    requested = ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm__throughput.avg.pct_of_peak_sustained_active")
    assert ncu.unknown_metrics(line, requested) == {"sm__throughput.avg.pct_of_peak_sustained_active"}
    plain = "==ERROR== Failed to find metric sm__throughput.avg.pct_of_peak_sustained_active"
    assert ncu.unknown_metrics(plain, requested) == {"sm__throughput.avg.pct_of_peak_sustained_active"}
    assert ncu.unknown_metrics("==ERROR== Failed to find metric regex:^bogus__x\\.sum$", requested) == set()


def test_curated_metrics_have_no_pre_volta_stall_name() -> None:
    # nvprof's stall_memory_dependency became long_scoreboard; the old smsp__ spelling does not exist
    assert not any("stalled_memory_dependency" in m for m in ncu.CURATED_METRICS)
    assert "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct" in ncu.CURATED_METRICS


def test_real_error_form_is_retried_even_when_the_program_prints_after_it(tmp_path) -> None:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    missing = "smsp__warp_issue_stalled_long_scoreboard_per_warp_active"
    noise = "; ".join(f"echo 'program line {i}'" for i in range(12))  # pushes the error out of the tail
    fail = (f"echo '==PROF== Connected to process 4242 (/usr/bin/python3)'; "
            f"echo '==ERROR== Failed to find metric regex:^{missing}\\.pct$' >&2; {noise}; exit 1")
    _fake_ncu(bin_dir, f'echo call >> "{calls}"\n'
                       f'case "$*" in *{missing}*) {fail};; esac\n'
                       f"cat '{FIXTURES / 'raw_two_kernels.csv'}'")
    record = ncu.profile_script("bench.py", options=_options(bin_dir))
    assert record.available and calls.read_text().count("call") == 2


# ----- what ncu needs from the sandbox --------------------------------------------------------
def test_loopback_works_here() -> None:
    assert ncu.loopback_works()


def test_without_loopback_the_profile_says_why_at_once(tmp_path) -> None:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        pytest.skip("needs unshare")
    probe = subprocess.run(["unshare", "-rn", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {probe.stderr.decode()[:200]}")
    bin_dir = tmp_path / "bin"
    _fake_ncu(bin_dir, f"cat '{FIXTURES / 'raw_two_kernels.csv'}'")
    options = f"ncu.NcuOptions(search_path={str(bin_dir)!r}, cuda_available=True)"
    code = ("from agentforge.evaluator.hardware import ncu; "
            f"r = ncu.profile_script('b.py', options={options}); print(r.available, r.reason)")
    out = subprocess.run(["unshare", "-rn", sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("False") and "loopback" in out.stdout, out.stderr[-2000:]


def test_the_drivers_profiling_restriction_is_read_from_its_params(tmp_path) -> None:
    params = tmp_path / "params"
    params.write_text("ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\nEnableMSI: 1\n")
    assert ncu.profiling_restricted(str(params)) is True
    params.write_text("RmProfilingAdminOnly: 0\n")
    assert ncu.profiling_restricted(str(params)) is False
    assert ncu.profiling_restricted(str(tmp_path / "none")) is None


def test_the_profiled_program_runs_with_the_judges_numeric_switches(monkeypatch) -> None:
    """A fresh process starts with torch's defaults (cuDNN's TF32 on): the profile would show other
    kernels than the timed ones for fp32 convolutions."""
    import torch
    from agentforge.evaluator.worker import profile_target

    seen: dict[str, object] = {}

    def profiled(job_path: str) -> int:
        seen.update(cudnn_tf32=torch.backends.cudnn.allow_tf32, matmul_tf32=torch.backends.cuda.matmul.allow_tf32,
                    precision=torch.get_float32_matmul_precision(), deterministic=torch.backends.cudnn.deterministic)
        return 0

    monkeypatch.setattr(profile_target, "_profiled", profiled)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    assert profile_target.main("job.json") == 0
    assert seen == {"cudnn_tf32": False, "matmul_tf32": False, "precision": "highest", "deterministic": False}
    assert torch.backends.cudnn.allow_tf32 is True  # put back afterwards


# ----- the metrics this GPU has: asked once, pruned before the profile runs ----------------------
def test_query_metrics_listing_is_parsed_to_base_names() -> None:
    names = ncu.parse_query_metrics((FIXTURES / "query_metrics_gh100.txt").read_text())
    assert "dram__bytes_read" in names and "sm__inst_executed_pipe_fma" in names
    assert "Metric" not in " ".join(names) and not any(n.startswith("-") for n in names)
    assert ncu.parse_query_metrics('"Metric Name","Metric Description"\n"sm__cycles_active","# of cycles"\n') \
        == frozenset({"sm__cycles_active"})


def test_metrics_the_gpu_lacks_are_pruned_and_unlisted_units_kept() -> None:
    names = ncu.parse_query_metrics((FIXTURES / "query_metrics_gh100.txt").read_text())
    kept, dropped = ncu.prune_metrics(ncu.CURATED_METRICS, names)
    assert set(dropped) == {"sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active",
                            "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active"}
    assert "launch__registers_per_thread" in kept and "dram__bytes.sum.per_second" in kept
    assert ncu.prune_metrics(ncu.CURATED_METRICS, None) == (ncu.CURATED_METRICS, ())


def test_the_profile_runs_once_with_the_pruned_metrics(tmp_path) -> None:
    """One query, then one profiled run without the two pipes: no rerun for an unknown metric."""
    bin_dir, calls, args_file = tmp_path / "bin", tmp_path / "calls", tmp_path / "args"
    _fake_ncu(bin_dir, f'if [ "$1" = "--query-metrics" ]; then echo query >> "{calls}"; '
                       f'cat \'{FIXTURES / "query_metrics_gh100.txt"}\'; exit 0; fi\n'
                       f'echo call >> "{calls}"\nprintf "%s\\n" "$@" > "{args_file}"\n'
                       f"cat '{FIXTURES / 'raw_two_kernels.csv'}'")
    ncu._QUERIED.clear()
    record = ncu.profile_script("bench.py", options=_options(bin_dir, query_metrics=True))
    assert record.available, record.reason
    assert calls.read_text().split() == ["query", "call"]
    metrics = args_file.read_text().split("\n")[args_file.read_text().split("\n").index("--metrics") + 1]
    assert "sm__inst_executed_pipe_fp32" not in metrics and "sm__inst_executed_pipe_tensor" not in metrics
    assert "dram__bytes_read.sum" in metrics and "launch__registers_per_thread" in metrics
    ncu.profile_script("bench.py", options=_options(bin_dir, query_metrics=True))
    assert calls.read_text().split() == ["query", "call", "call"]  # asked once per process
    ncu._QUERIED.clear()
