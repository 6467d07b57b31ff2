"""Prompt templates as files beside this module, rendered by one pure function.

A template names its variables as `{{name}}`; `render` fills them (a missing one is an error, so a
template and its caller cannot drift apart silently). `version` is the hash of the template texts a
prompt was built from; it is kept in each candidate's `Provenance.prompt_version`.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

_DIR = Path(__file__).resolve().parent
_VAR = re.compile(r"\{\{(\w+)\}\}")


@functools.cache
def template(name: str) -> str:
    path = _DIR / f"{name}.md"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in _DIR.glob("*.md")))
        raise KeyError(f"no prompt template {name!r}; known: {known}")
    return path.read_text()


def render(name: str, **variables: object) -> str:
    """The template `name` with every `{{var}}` replaced by `str(variables[var])`."""
    text = template(name)
    missing = sorted({m for m in _VAR.findall(text) if m not in variables})
    if missing:
        raise KeyError(f"prompt {name!r} needs {', '.join(missing)}")
    return _VAR.sub(lambda m: str(variables[m.group(1)]), text)


def version(*names: str) -> str:
    """A short hash of the named templates' texts, in order."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode() + b"\0" + template(name).encode() + b"\0")
    return digest.hexdigest()[:12]
