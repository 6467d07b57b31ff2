"""What a job leaves behind and how much it may take: a parent killed with SIGKILL leaves neither
processes nor (after the next run) folders; a job's total disk and /dev/shm use is capped; a fork
burst is named a process limit, and processes sharing their parent's pages are not a memory hog.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from agentforge.evaluator.result import Status
from agentforge.sandbox import reaper, run
from agentforge.sandbox.process_backend import ProcessBackend
from agentforge.sandbox.watchdog import allocated_bytes
from sandbox_helpers import HERE, MODES, fake_config, isolating_modes, make_job, processes_with

# A parent that runs one job which writes 64 MiB in its work folder, then sleeps with a marker.
PARENT = """
import sys
sys.path.insert(0, {here!r})
from pathlib import Path
from sandbox_helpers import fake_config, make_job
from agentforge.sandbox import run
config = fake_config(Path({tmp!r}), isolation={mode!r}, timeout_s=120)
run(make_job("open('big', 'wb').write(b'x' * 64 * 2**20)\\nopen('started', 'w').close()\\n"
             "import subprocess\\nsubprocess.Popen(['sh', '-c', 'sleep 300', {marker!r}]).wait()"), config)
"""


def _started(root: Path) -> bool:
    return any(root.glob("job-*/work/started"))


@pytest.mark.parametrize("mode", MODES)
def test_kill_9_leaves_no_process_and_the_next_run_removes_the_folder(tmp_path: Path, mode: str) -> None:
    marker = f"leftover-{uuid.uuid4().hex[:10]}"
    parent = subprocess.Popen([sys.executable, "-c", PARENT.format(here=str(HERE), tmp=str(tmp_path), mode=mode,
                                                                   marker=marker)])
    work_root = tmp_path / "work"
    deadline = time.monotonic() + 120
    while not _started(work_root) and time.monotonic() < deadline:
        assert parent.poll() is None, "the parent ended before its job started"
        time.sleep(0.1)
    assert processes_with(marker), "the job never started its marked process"
    parent.send_signal(signal.SIGKILL)
    parent.wait()

    deadline = time.monotonic() + 10  # the namespace (or the reaper) dies with the parent
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == [], "a process of the killed job outlived its parent"
    (left,) = list(work_root.glob("job-*"))
    assert allocated_bytes([str(left)]) >= 64 * 2**20  # what the candidate wrote is still there

    result = run(make_job("RESULT_NOTE = 'next run'"), fake_config(tmp_path, isolation=mode))
    assert result.status == Status.OK, result.error
    assert not left.exists() and list(work_root.glob("job-*")) == []


def test_the_folders_of_live_and_kept_jobs_are_left_alone(tmp_path: Path) -> None:
    live = tmp_path / "job-live"
    live.mkdir()
    claim = reaper.claim_job_dir(live)
    kept = tmp_path / "job-kept"  # keep_workdir: the lock file is gone once the job ended
    kept.mkdir()
    (kept / "stdout.txt").write_text("kept for a post-mortem")
    half = tmp_path / "job-being-created"  # between mkdtemp and claim_job_dir
    half.mkdir()
    dead = tmp_path / "job-dead"
    dead.mkdir()
    reaper.claim_job_dir(dead).release()  # its owner is gone
    (dead / "sub").mkdir()
    (dead / "sub" / "f").write_text("x")
    (dead / "sub").chmod(0)  # a candidate locked a folder: removal must still work

    assert reaper.remove_dead_job_dirs(tmp_path) == [str(dead)]
    assert live.exists() and kept.exists() and half.exists() and not dead.exists()
    claim.release()
    assert reaper.remove_dead_job_dirs(tmp_path) == [str(live)]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_folder_left_without_its_lock_by_a_killed_process_is_removed(tmp_path: Path) -> None:
    """A process killed between creating a job folder and claiming it, or while removing it (the
    lock file gone, the rest not yet), leaves a folder with no lock: its name says whose it was."""
    dead = _dead_pid()
    half_made = tmp_path / f"job-{dead}-abcd1234"
    half_made.mkdir()
    half_removed = tmp_path / f"docker-job-{dead}-efgh5678"
    (half_removed / "work" / "locked").mkdir(parents=True)
    (half_removed / "work" / "locked").chmod(0)
    kept = tmp_path / f"job-{dead}-kept0000"
    kept.mkdir()
    reaper.mark_kept(kept)
    mine, claim = reaper.make_job_dir(tmp_path)
    assert mine.name.startswith(f"job-{os.getpid()}-")
    (mine / reaper.LOCK_NAME).unlink()  # as if this live process were half-way through removing it

    assert sorted(reaper.remove_dead_job_dirs(tmp_path)) == sorted([str(half_made), str(half_removed)])
    assert kept.exists() and mine.exists()
    claim.release()
    reaper.remove_job_dir(mine)
    assert not mine.exists()


def test_a_kept_workdir_survives_later_runs(tmp_path: Path) -> None:
    config = fake_config(tmp_path, keep_workdir=True)
    assert run(make_job("RESULT_NOTE = 1"), config).status == Status.OK
    (kept,) = list((tmp_path / "work").glob("job-*"))
    ProcessBackend(config)  # sweeps at start
    assert kept.exists()


@pytest.mark.parametrize("mode", MODES)
def test_a_cache_folder_whose_parents_do_not_exist_yet_is_made(tmp_path: Path, mode: str) -> None:
    """A new account has no ~/.cache: every job failed before its child started ("could not prepare
    the sandbox: No such file or directory: '~/.cache'"), the first command a new user typed."""
    # a home the sandbox's uid can reach (pytest's tmp_path sits under a 0700 folder, where the
    # sandbox falls back to a cache of its own before it looks further down)
    home = Path(tempfile.mkdtemp(prefix="agentforge-new-home-", dir="/tmp"))
    try:
        home.chmod(0o755)
        cache = home / ".cache" / "agentforge"
        result = run(make_job("RESULT_NOTE = 1"), fake_config(tmp_path, isolation=mode, cache_dir=str(cache)))
        assert result.status == Status.OK, result.summary()
        assert cache.is_dir()
    finally:
        shutil.rmtree(home, ignore_errors=True)


WRITE_LOOP = """
import os
n = 0
try:
    while True:
        with open(os.path.join({where!r}, f'f{{n}}'), 'wb') as fh:
            fh.write(os.urandom(2**20) * 32)  # 32 MiB, well under the per-file limit
        n += 1
except OSError as exc:
    RESULT_NOTE = f'{{n}} files, then {{exc}}'
"""


@pytest.mark.parametrize("mode", MODES)
def test_many_files_in_the_work_folder_hit_the_disk_cap(tmp_path: Path, mode: str) -> None:
    result = run(make_job(WRITE_LOOP.format(where=".")), fake_config(tmp_path, isolation=mode, disk_gb=0.25))
    assert result.status == Status.CRASH, result.candidate_meta
    assert result.error is not None and result.error.type == "DiskLimit", result.error
    assert "sandbox.disk_gb" in result.error.message
    assert "(sandbox.disk_gb): work folder 0." in result.error.message  # where the bytes were
    assert list((tmp_path / "work").glob("job-*")) == []


@pytest.mark.parametrize("mode", isolating_modes())
@pytest.mark.parametrize("where", ["/dev/shm", "/tmp"])
def test_filling_private_shm_or_tmp_hits_the_disk_cap(tmp_path: Path, mode: str, where: str) -> None:
    """/dev/shm is RAM: 448 MiB files there, each under the file-size limit, once filled memory
    unchecked; the private tmpfs of the job's namespace now counts towards its disk cap."""
    result = run(make_job(WRITE_LOOP.format(where=where)), fake_config(tmp_path, isolation=mode, disk_gb=0.25))
    if result.status == Status.OK:  # bwrap sizes the tmpfs itself: the writes stop at the cap
        assert mode == "bwrap" and "No space left on device" in result.candidate_meta["note"]
        assert int(result.candidate_meta["note"].split()[0]) * 32 <= 256
    else:
        assert result.status == Status.CRASH
        assert result.error is not None and result.error.type == "DiskLimit", result.error


def test_disk_cap_defaults_to_2_gib() -> None:
    from agentforge.sandbox import SandboxConfig
    from agentforge.sandbox.config import from_settings

    from agentforge.settings import Settings

    assert SandboxConfig().disk_gb == 2.0
    settings = Settings()
    settings.sandbox.disk_gb = 0.5
    assert from_settings(settings.sandbox, "/tmp/c").disk_gb == 0.5


@pytest.mark.parametrize("mode", MODES)
def test_fork_burst_is_the_process_limit_not_memory(tmp_path: Path, mode: str) -> None:
    """Forked children share the parent's pages; summing their resident sets reported a fork
    burst as "MemoryLimit 21 GiB". A burst that reaches the process limit is named so; one that
    RLIMIT_NPROC stops first (its count includes the sandbox uid's other processes on the host)
    ends however the candidate handles the failed fork, but never as a memory limit."""
    marker = f"burst{uuid.uuid4().hex[:8]}"
    source = (
        "import os, time\nheld = bytearray(200 * 2**20)\nfor i in range(0, len(held), 4096):\n    held[i] = 1\n"
        "for _ in range(500):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        f"    if pid == 0:\n        os.execvp('sh', ['sh', '-c', 'sleep 60', '{marker}'])\n"
        "time.sleep(30)\n"
    )
    result = run(make_job(source), fake_config(tmp_path, isolation=mode, max_processes=48, memory_gb=3.0,
                                               timeout_s=60))
    assert result.error is None or result.error.type != "MemoryLimit", result.error
    if mode == "none":  # the uid's count is the host's: the burst reaches exactly the limit
        assert result.status == Status.CRASH
        assert result.error is not None and result.error.type == "ProcessLimit", result.error
        assert "fork burst" in result.error.message
    assert processes_with(marker) == []


def test_children_sharing_their_parents_pages_are_not_a_memory_hog(tmp_path: Path) -> None:
    """24 forked children of a process holding 200 MiB: their resident sets add up to ~5 GiB,
    their memory (shared pages once) to ~200 MiB, under the 2 GiB limit."""
    source = (
        "import os, time\nheld = bytearray(200 * 2**20)\nfor i in range(0, len(held), 4096):\n    held[i] = 1\n"
        "kids = []\nfor _ in range(24):\n    pid = os.fork()\n    if pid == 0:\n        time.sleep(3)\n"
        "        os._exit(0)\n    kids.append(pid)\n"
        "for pid in kids:\n    os.waitpid(pid, 0)\nRESULT_NOTE = 'all children done'\n"
    )
    result = run(make_job(source), fake_config(tmp_path, memory_gb=2.0, max_processes=64))
    assert result.status == Status.OK, result.error
    assert result.candidate_meta["note"] == "all children done"


def test_a_real_hog_is_still_a_memory_limit(tmp_path: Path) -> None:
    source = ("import os, time\nhogs = []\nfor _ in range(4):\n    if os.fork() == 0:\n"
              "        b = bytearray(700 * 2**20)\n        for i in range(0, len(b), 4096):\n            b[i] = 1\n"
              "        time.sleep(30)\n        os._exit(0)\ntime.sleep(30)\n")
    result = run(make_job(source), fake_config(tmp_path, memory_gb=2.0, timeout_s=60))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "MemoryLimit", result.error
    assert "shared pages counted once" in result.error.message


def test_process_tree_is_unaffected_by_our_own_namespace(tmp_path: Path) -> None:
    """Outside a sandbox (same mount namespace as the parent) no tmpfs is attributed to the job."""
    from agentforge.sandbox.watchdog import private_tmpfs_bytes

    assert private_tmpfs_bytes([os.getpid()]) == 0


def test_only_a_private_tmpfs_counts_towards_the_disk_cap() -> None:
    """A /tmp or /dev/shm seen through another mount namespace counts only when it is a tmpfs: a
    disk filesystem there (a bind, an overlay) reports the whole disk's use, not the job's (a CI run
    once killed an honest job for 78 GiB, the VM's whole disk)."""
    from agentforge.sandbox.watchdog import _private_used, mount_types

    mountinfo = ("22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                 "30 22 0:40 / /tmp rw,nosuid - ext4 /dev/vda rw\n"
                 "31 22 0:27 / /dev/shm rw - tmpfs tmpfs rw\n"
                 "32 22 0:41 / /tmp rw - tmpfs tmpfs rw,size=262144k\n")
    assert mount_types(mountinfo) == {"/": "ext4", "/tmp": "tmpfs", "/dev/shm": "tmpfs"}  # the last at /tmp
    assert mount_types(None) is None
    assert _private_used("/", "/dev/shm", "ext4") == 0  # another filesystem, but a disk: not the job's
    assert _private_used("/dev/shm", "/dev/shm", "tmpfs") == 0  # our own tmpfs
