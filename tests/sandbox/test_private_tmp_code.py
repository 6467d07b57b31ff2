"""The worker's private /tmp keeps its own code in sight: a checkout or a virtualenv under /tmp is
bound back read-only (a fresh clone in /tmp broke every in-process verdict: the worker could no
longer import the evaluator), and the writable folders inside it stay writable."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace needs root here")

SCRIPT = """
import os, sys
from agentforge.sandbox import limits
code, work, other = sys.argv[1:4]
print(limits.private_tmp(None, (work,), (code,)))
print(open(os.path.join(code, "module.py")).read().strip())
for target in (os.path.join(code, "new.py"), os.path.join(work, "out.txt"), os.path.join(other, "x")):
    try:
        open(target, "w").write("x")
        print("wrote", os.path.basename(target))
    except OSError as exc:
        print("refused", os.path.basename(target), exc.errno)
"""


def test_code_under_tmp_is_seen_read_only_and_work_inside_it_stays_writable() -> None:
    code = tempfile.mkdtemp(prefix="af-code-", dir="/tmp")
    other = tempfile.mkdtemp(prefix="af-other-", dir="/tmp")
    work = os.path.join(code, "work")
    os.makedirs(work)
    with open(os.path.join(code, "module.py"), "w") as fh:
        fh.write("VALUE = 1\n")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, code, work, other], capture_output=True, text=True,
                          timeout=60)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stderr
    assert lines[0] == "yes" and lines[1] == "VALUE = 1"
    assert lines[2] == "refused new.py 30"  # EROFS: the code is read-only
    assert lines[3] == "wrote out.txt"  # the work folder inside it is writable
    assert lines[4] == "refused x 2"  # ENOENT: the rest of the host's /tmp is out of sight
    assert not os.path.exists(os.path.join(code, "new.py")) and not os.path.exists(os.path.join(other, "x"))
    shutil.rmtree(code)
    shutil.rmtree(other)
