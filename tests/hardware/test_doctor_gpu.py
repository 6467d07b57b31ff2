"""The doctor's GPU lines without a GPU: /dev/nvidia* on a fake /dev tree (only character devices count, so
a MIG-capable card's /dev/nvidia-caps folder, 0755, does not fail a normal H100) and the metrics
ncu lacks on this GPU, through fake ncu binaries (issue 32)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from agentforge import doctor

FACTS = doctor.Facts(driver_cuda="13.0", gpu=True)


def _open_node() -> str:
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and os.stat("/dev/null").st_mode & 0o006 == 0o006
    return "/dev/null"


def _closed_node(tmp_path: Path) -> str:
    """A character device that others cannot read and write: made here when allowed, else one of
    the machine's own (a console or kernel log node is never 0666)."""
    made = tmp_path / "closed-node"
    try:
        os.mknod(made, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        return str(made)
    except OSError:
        pass
    for name in sorted(os.listdir("/dev")):
        path = os.path.join("/dev", name)
        mode = os.lstat(path).st_mode
        if stat.S_ISCHR(mode) and mode & 0o006 != 0o006:
            return path
    raise AssertionError("no closed character device to link to")


def _fake_dev(tmp_path: Path, **nodes: str) -> Path:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name, target in nodes.items():
        (dev / name.replace("_", "-")).symlink_to(target)
    return dev


def test_the_mig_caps_folder_is_not_a_closed_node(tmp_path: Path) -> None:
    dev = _fake_dev(tmp_path, nvidiactl=_open_node(), nvidia0=_open_node(), nvidia_uvm=_open_node())
    caps = dev / "nvidia-caps"
    caps.mkdir()
    caps.chmod(0o755)
    check = doctor.check_device_nodes(FACTS, str(dev))
    assert check.status == doctor.OK, check
    assert "3 nodes" in check.detail and "nvidia-caps" not in check.detail


def test_a_closed_character_device_still_fails(tmp_path: Path) -> None:
    dev = _fake_dev(tmp_path, nvidiactl=_open_node(), nvidia_uvm=_open_node(), nvidia0=_closed_node(tmp_path))
    (dev / "nvidia-caps").mkdir()
    check = doctor.check_device_nodes(FACTS, str(dev))
    assert check.status == doctor.FAIL
    assert str(dev / "nvidia0") in check.detail and "nvidia-caps" not in check.detail
    assert "chmod 0666" in check.fix


def test_a_missing_control_node_fails_and_a_missing_uvm_warns(tmp_path: Path) -> None:
    dev = _fake_dev(tmp_path, nvidia0=_open_node(), nvidia_uvm=_open_node())
    assert doctor.check_device_nodes(FACTS, str(dev)).status == doctor.FAIL
    dev2 = tmp_path / "two"
    dev2.mkdir()
    (dev2 / "nvidiactl").symlink_to(_open_node())
    (dev2 / "nvidia-uvm-tools").mkdir()  # a folder of that name is no node either
    check = doctor.check_device_nodes(FACTS, str(dev2))
    assert check.status == doctor.WARN and "nvidia-uvm" in check.detail


def test_the_ncu_line_names_the_curated_metrics_this_gpu_lacks(tmp_path: Path) -> None:
    from agentforge.evaluator.hardware import ncu

    fixture = Path(__file__).parent / "fixtures" / "query_metrics_gh100.txt"
    fake = tmp_path / "ncu"
    fake.write_text(f"#!/bin/sh\n[ \"$1\" = \"--query-metrics\" ] && cat '{fixture}'\n")
    fake.chmod(0o755)
    ncu._QUERIED.clear()
    try:
        line = doctor._metric_coverage(str(fake))
    finally:
        ncu._QUERIED.clear()
    assert f"{len(ncu.CURATED_METRICS) - 2} of {len(ncu.CURATED_METRICS)} curated metrics" in line
    assert "sm__inst_executed_pipe_fp32" in line and "sm__inst_executed_pipe_tensor" in line
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexit 1\n")
    silent.chmod(0o755)
    assert "costs a profile rerun" in doctor._metric_coverage(str(silent))
    ncu._QUERIED.clear()
