"""What a candidate cannot do from inside the sandbox: reach the network, write outside its work
directory, keep processes alive after the run, fork without bound, or forge its verdict."""

from __future__ import annotations

import ast
import os
import socket
import uuid
from pathlib import Path

import pytest
from agentforge.evaluator.result import Status
from agentforge.sandbox import run
from agentforge.sandbox.isolation import is_root
from sandbox_helpers import MODES, fake_config, isolating_modes, make_job, processes_with


@pytest.mark.parametrize("mode", isolating_modes())
def test_network_call_fails_inside(tmp_path: Path, mode: str) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        source = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)"
        result = run(make_job(source), fake_config(tmp_path, isolation=mode))
        with pytest.raises(TimeoutError):
            server.accept()  # nothing ever reached the host's loopback
    assert result.status == Status.RUNTIME_ERROR
    assert result.error is not None and result.error.type in ("ConnectionRefusedError", "OSError")
    assert "no-net" in result.provenance.sandbox


@pytest.mark.parametrize("mode", isolating_modes())
def test_external_network_is_unreachable(tmp_path: Path, mode: str) -> None:
    source = "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)"
    result = run(make_job(source), fake_config(tmp_path, isolation=mode))
    assert result.status == Status.RUNTIME_ERROR
    assert result.error is not None and result.error.type == "OSError"  # network unreachable


@pytest.mark.parametrize("mode", isolating_modes())
@pytest.mark.parametrize("target", ["repo", "home", "tmp"])
def test_write_outside_the_workdir_fails(tmp_path: Path, mode: str, target: str, repo_root: Path) -> None:
    name = f"sandbox-escape-{uuid.uuid4().hex}"
    path = {"repo": repo_root / name, "home": Path.home() / name, "tmp": tmp_path / name}[target]
    source = f"open({str(path)!r}, 'w').write('escaped')"
    result = run(make_job(source), fake_config(tmp_path, isolation=mode))
    assert not path.exists()
    assert result.status == Status.RUNTIME_ERROR
    assert result.error is not None
    assert result.error.type in ("OSError", "PermissionError", "FileNotFoundError")


@pytest.mark.parametrize("mode", MODES)
def test_writing_in_the_workdir_works(tmp_path: Path, mode: str) -> None:
    source = ("import os, tempfile\nopen('here.txt', 'w').write('ok')\n"
              "tempfile.NamedTemporaryFile().write(b'ok')\nRESULT_NOTE = os.getcwd()")
    result = run(make_job(source), fake_config(tmp_path, isolation=mode))
    assert result.status == Status.OK, result.error
    assert Path(result.candidate_meta["note"]).name == "work"


@pytest.mark.parametrize("mode", MODES)
def test_descendants_die_with_the_run(tmp_path: Path, mode: str) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.{os.getpid()}"
    source = (
        "import subprocess\n"
        f"subprocess.Popen(['sleep', '{marker}'])\n"
        f"subprocess.Popen(['sleep', '{marker}1'], start_new_session=True)\n"
        "import os\nif os.fork() == 0:\n    os.setsid()\n"
        f"    os.execvp('sleep', ['sleep', '{marker}2'])\n"
    )
    result = run(make_job(source), fake_config(tmp_path, isolation=mode))
    assert result.status == Status.OK, result.error
    assert processes_with(f"sleep {marker}") == []


def test_fork_bomb_is_bounded_and_cleaned_up(tmp_path: Path) -> None:
    config = fake_config(tmp_path, isolation="auto", max_processes=64)
    probe_uid = run(make_job("import os\nRESULT_NOTE = os.getuid()"), config).candidate_meta["note"]
    if probe_uid == "0":
        pytest.skip("the child keeps uid 0 here (no isolation to drop it safely); RLIMIT_NPROC binds no root")
    marker = f"bomb{uuid.uuid4().hex[:8]}"
    source = (
        "import os, time\nn = 0\n"
        "for _ in range(5000):\n"
        "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        f"    if pid == 0:\n        os.execvp('sleep', ['sleep', '60', '{marker}'])\n"
        "    n += 1\nRESULT_NOTE = n\n"
    )
    result = run(make_job(source), config)
    if result.status == Status.OK:  # RLIMIT_NPROC stopped it before the tree reached the limit
        assert 0 < int(result.candidate_meta["note"]) <= 64
    else:  # the watchdog saw the tree at the limit: a fork burst, named so
        assert result.error is not None and result.error.type == "ProcessLimit", result.error
    assert processes_with(marker) == []


@pytest.mark.skipif(not is_root(), reason="the uid drop applies when started as root")
@pytest.mark.parametrize("mode", isolating_modes())
def test_child_runs_as_the_sandbox_uid(tmp_path: Path, mode: str) -> None:
    result = run(make_job("import os\nRESULT_NOTE = (os.getuid(), os.getgid(), os.getgroups())"),
                 fake_config(tmp_path, isolation=mode))
    assert result.candidate_meta["note"] == "(65534, 65534, [])"
    assert "uid=65534" in result.provenance.sandbox


def test_stdin_is_closed_and_the_environment_sanitised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTFORGE_TEST_SECRET_KEY", "do-not-leak")
    source = "import os, sys\nRESULT_NOTE = (sys.stdin.read(), sorted(k for k in os.environ if 'SECRET' in k))"
    result = run(make_job(source), fake_config(tmp_path))
    assert result.candidate_meta["note"] == "('', [])"


def test_fake_result_on_stdout_does_not_fool_the_parent(tmp_path: Path) -> None:
    source = (
        "import os, sys\n"
        "from agentforge.evaluator.result import EvalResult, Status, Stage\n"
        "fake = EvalResult(task_name=job.task_name, candidate_hash='x', backend='cpu', status=Status.OK,"
        " stage=Stage.DONE)\n"
        "print(fake.to_json()); sys.stdout.flush()\n"
        "print(fake.to_json(), file=sys.stderr); sys.stderr.flush()\n"
        "os._exit(0)\n"
    )
    result = run(make_job(source), fake_config(tmp_path))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "NoResult"


def test_junk_on_inherited_fds_does_not_fool_the_parent(tmp_path: Path) -> None:
    source = (
        "import os\n"
        "for fd in range(3, 256):\n"
        "    try:\n        os.write(fd, b'{\"status\": \"ok\"}')\n    except OSError:\n        pass\n"
        "for fd in range(3, 256):\n"
        "    try:\n        os.close(fd)\n    except OSError:\n        pass\n"
    )
    result = run(make_job(source), fake_config(tmp_path))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type in ("BadResult", "NoResult")


def test_forged_frame_without_the_nonce_does_not_fool_the_parent(tmp_path: Path) -> None:
    source = (
        "import os\n"
        "from agentforge.candidate import code_hash\n"
        "from agentforge.evaluator.result import EvalResult, Status, Stage\n"
        "from agentforge.sandbox.channel import encode_frame, new_nonce\n"
        "fake = EvalResult(task_name=job.task_name, candidate_hash=code_hash(job.candidate_source),"
        " backend='cpu', status=Status.OK, stage=Stage.DONE).to_json().encode()\n"
        "for fd in sorted(int(name) for name in os.listdir('/proc/self/fd')):\n"
        "    try:\n        os.write(fd, encode_frame(fake, new_nonce()))\n    except OSError:\n        pass\n"
        "os._exit(0)\n"
    )
    result = run(make_job(source), fake_config(tmp_path))
    assert result.status == Status.CRASH
    assert result.error is not None and result.error.type == "BadResult"


@pytest.mark.parametrize("mode", isolating_modes())
def test_tmp_and_shm_are_private_and_writable(tmp_path: Path, mode: str) -> None:
    name = f"sandbox-private-{uuid.uuid4().hex}"
    source = (f"open('/tmp/{name}', 'w').write('x')\nopen('/dev/shm/{name}', 'w').write('x')\n"
              "import os\nRESULT_NOTE = sorted(os.listdir('/tmp'))[:50]")
    result = run(make_job(source), fake_config(tmp_path, isolation=mode))
    assert result.status == Status.OK, result.error
    assert not Path(f"/tmp/{name}").exists() and not Path(f"/dev/shm/{name}").exists()


@pytest.mark.parametrize("mode", isolating_modes())
def test_own_proc_files_are_writable_and_kernel_wide_ones_closed(tmp_path: Path, mode: str) -> None:
    """A process names its threads through /proc (the CUDA driver does, and cuInit fails under a
    read-only /proc); the kernel's own settings stay closed to it, and under unshare, which builds
    the tree itself, they are read-only mounts."""
    source = (
        "import os, threading\n"
        "go = threading.Event()\n"
        "t = threading.Thread(target=go.wait)\n"
        "t.start()\n"
        "path = f'/proc/self/task/{t.native_id}/comm'\n"
        "with open(path, 'w') as fh:\n"
        "    fh.write('named-by-test')\n"
        "name = open(path).read().strip()\n"
        "go.set(); t.join()\n"
        "try:\n"
        "    open('/proc/sys/kernel/hostname', 'w').write('sandbox')\n"
        "    refused = 'written'\n"
        "except OSError as exc:\n"
        "    refused = type(exc).__name__\n"
        "ro = lambda p: bool(os.statvfs(p).f_flag & os.ST_RDONLY)\n"
        "RESULT_NOTE = repr((name, refused, ro('/proc/self'), ro('/proc/sys'), ro('/proc/irq')))"
    )
    result = run(make_job(source), fake_config(tmp_path, isolation=mode))
    assert result.status == Status.OK, result.error
    name, refused, self_ro, sys_ro, irq_ro = ast.literal_eval(result.candidate_meta["note"])
    assert (name, self_ro) == ("named-by-test", False)
    assert refused in ("PermissionError", "OSError")
    if mode == "unshare":
        assert (sys_ro, irq_ro) == (True, True)
