"""What a CLI run may have left behind: processes and sandbox job folders, found by a path that
only that run uses (its cache folder, which every sandbox child carries in its environment)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path


def processes_mentioning(text: str) -> list[int]:
    """Pids (not ours) whose command line or environment contains `text`."""
    needle, found = text.encode(), []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        for part in ("cmdline", "environ"):
            try:
                if needle in Path(entry.path, part).read_bytes():
                    found.append(int(entry.name))
                    break
            except OSError:
                continue
    return found


def job_folders(root: Path) -> list[Path]:
    return sorted(root.glob("job-*")) if root.is_dir() else []


def wait_until(predicate: Callable[[], object], timeout_s: float, poll_s: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return bool(predicate())
