"""What a shared library links against (its ELF `DT_NEEDED` entries), read by the judge itself from
the file, not taken from the worker's word: a candidate's own build linked to a BLAS is a
library fallback however it got there."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

_NEEDED = re.compile(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]")
MAX_LIBRARIES = 32


def needed(paths: list[str]) -> dict[str, list[str]]:
    """{path: its NEEDED libraries} for the paths that are regular files (at most MAX_LIBRARIES)."""
    readelf = shutil.which("readelf")
    found: dict[str, list[str]] = {}
    if readelf is None:
        return found
    for path in paths[:MAX_LIBRARIES]:
        if not Path(path).is_file():
            continue
        try:
            done = subprocess.run([readelf, "-d", "-W", path], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            continue
        found[path] = _NEEDED.findall(done.stdout)
    return found
