"""Puts this folder on sys.path so tests import `sandbox_helpers` (the child finds `fake_entries`
through SandboxConfig.python_paths)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
