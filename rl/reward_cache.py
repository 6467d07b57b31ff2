"""The reward service's evaluation cache on disk, shared by every process that names the file.

A JSONL file of `{"key": ..., "result": EvalResult}` lines. Several processes (verl's reward
workers, a reward server and a trainer) may append to it and read it at once: each append takes
an exclusive POSIX record lock (`fcntl.lockf`, which NFS honours too) and writes its line with
one `write` on an `O_APPEND` descriptor; each read takes a shared lock and reads only the lines
appended since this process last looked, so a verdict one process measured serves the others
from then on. A line that does not parse (a file cut short by a crash, or written by hand) is
skipped with a warning, never fatal; the first valid entry for a key wins.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

from agentforge.evaluator.result import EvalResult


class CacheFile:
    """One process's handle on a shared cache file; thread-safe."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offset = 0  # bytes of the file already read
        self._lock = threading.Lock()  # POSIX locks are per process: threads queue here first

    def read_new(self) -> dict[str, EvalResult]:
        """Entries appended (by any process) since the last call; all of them on the first."""
        with self._lock:
            if not self.path.is_file():
                return {}
            with self._locked(fcntl.LOCK_SH, os.O_RDONLY) as fd:
                os.lseek(fd, self._offset, os.SEEK_SET)
                chunks = []
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
            data = b"".join(chunks)
            end = data.rfind(b"\n") + 1  # a line without its newline is not complete yet
            self._offset += end
        return _parse(data[:end], self.path)

    def append(self, key: str, result: EvalResult) -> None:
        line = json.dumps({"key": key, "result": result.to_dict()}, allow_nan=False) + "\n"
        payload = line.encode()
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._locked(fcntl.LOCK_EX, os.O_WRONLY | os.O_APPEND | os.O_CREAT) as fd:
                written = 0
                while written < len(payload):  # one write in practice; a short write goes on
                    written += os.write(fd, payload[written:])

    @contextlib.contextmanager
    def _locked(self, kind: int, flags: int) -> Iterator[int]:
        fd = os.open(self.path, flags, 0o644)
        try:
            fcntl.lockf(fd, kind)  # whole file; released when fd closes
            yield fd
        finally:
            os.close(fd)


def _parse(data: bytes, path: Path) -> dict[str, EvalResult]:
    entries: dict[str, EvalResult] = {}
    bad = 0
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            result = EvalResult.from_json(json.dumps(entry["result"]))
            entries.setdefault(entry["key"], result)
        except (ValueError, KeyError, TypeError):
            bad += 1
    if bad:
        warnings.warn(f"reward cache {path}: skipped {bad} line(s) that are not cache entries",
                      RuntimeWarning, stacklevel=3)
    return entries
