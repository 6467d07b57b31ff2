"""A content-addressed store under a run's directory: every prompt, reply, candidate, verdict and
evaluation result is written once, named by the hash of its content; the graph's state holds
only these references."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


class ArtifactStore:
    def __init__(self, root: Path):
        self.root = Path(root)

    def put_text(self, text: str, suffix: str = "txt") -> str:
        """Store `text`; returns its reference `<sha256 prefix>.<suffix>`."""
        ref = f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.{suffix}"
        path = self.path(ref)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
            os.replace(tmp, path)  # atomic: a killed run never leaves half an artifact
        return ref

    def put_json(self, value: Any) -> str:
        return self.put_text(json.dumps(value, sort_keys=True, indent=1), "json")

    def get_text(self, ref: str) -> str:
        return self.path(ref).read_text()

    def get_json(self, ref: str) -> Any:
        return json.loads(self.get_text(ref))

    def path(self, ref: str) -> Path:
        if "/" in ref or ref.startswith("."):
            raise ValueError(f"not an artifact reference: {ref!r}")
        return self.root / ref[:2] / ref
