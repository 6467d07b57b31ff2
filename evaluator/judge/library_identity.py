"""What a mapped file is, read from its content rather than its name (which the candidate chooses).

The judge's native sampler names code by the file it runs in. A candidate can copy a library under
a bland name, into the build cache where its own builds live; so a file that would count as the
candidate's own (or as nothing known) is identified here, once per file, by what it holds:

- a library that defines BLAS/LAPACK/oneDNN/MKL entry points in its dynamic symbol table is a BLAS,
  whatever it is called (`blas_entry_points`);
- a file byte for byte identical to a library installed on this machine (torch's, a wheel's bundled
  ones, the system's) is that library (`KnownLibraries`): sizes first, a hash only on a size match.

Pure Python (struct), no subprocess: it runs in the judge while the worker is sampled.
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
import sys
from pathlib import Path

MAX_SYMBOL_BYTES = 32 * 2**20  # a dynamic symbol table and its strings, at most
# Entry points only a BLAS/LAPACK/oneDNN/MKL library defines: its C interfaces by prefix, and the
# Fortran ABI's routine names (trailing underscore, optionally the 64-bit-integer suffix).
_BLAS_PREFIX = re.compile(r"^(cblas_|scipy_cblas_|openblas_|scipy_openblas|LAPACKE_|mkl_|MKL_|dnnl_|bli_)")
_BLAS_FORTRAN = re.compile(
    r"^(scipy_)?[sdcz](gemm|gemv|symm|symv|syrk|syr2k|trmm|trsm|trmv|trsv|ger|axpy|dot|scal|copy|swap|nrm2|asum|"
    r"hemm|herk|her2k|getrf|getrs|potrf|gesv|gesvd|gesdd|geqrf|syev|syevd|heev)_(64_)?$")
BLAS_MIN_SYMBOLS = 2  # distinct entry points before a file is called a BLAS


def defined_symbols(path: str) -> list[str] | None:
    """Names the ELF file at `path` defines in its dynamic symbol table (64-bit little-endian ELF
    only), or None where it is not such a file or cannot be read."""
    try:
        with open(path, "rb") as f:
            header = f.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return None
            shoff, = struct.unpack_from("<Q", header, 0x28)
            shentsize, shnum = struct.unpack_from("<HH", header, 0x3A)
            if shentsize != 64 or not 0 < shnum < 4096:
                return None
            f.seek(shoff)
            table = f.read(64 * shnum)
            sections = [struct.unpack_from("<IIQQQQIIQQ", table, 64 * i) for i in range(len(table) // 64)]
            for _, kind, _, _, offset, size, link, _, _, entsize in sections:
                if kind != 11 or entsize != 24 or link >= len(sections):  # SHT_DYNSYM
                    continue
                str_offset, str_size = sections[link][4], sections[link][5]
                if size + str_size > MAX_SYMBOL_BYTES:
                    return None
                f.seek(offset)
                symbols = f.read(size)
                f.seek(str_offset)
                strings = f.read(str_size)
                return _names(symbols, strings)
    except (OSError, struct.error, ValueError):
        return None
    return []


def _names(symbols: bytes, strings: bytes) -> list[str]:
    names = []
    for i in range(1, len(symbols) // 24):  # entry 0 is the null symbol
        name, _info, _other, shndx = struct.unpack_from("<IBBH", symbols, 24 * i)
        if shndx == 0 or name >= len(strings):  # undefined: a reference, not a definition
            continue
        end = strings.find(b"\0", name)
        names.append(strings[name:end if end >= 0 else None].decode("latin-1"))
    return names


def blas_entry_points(names: list[str]) -> list[str]:
    return sorted({n for n in names if _BLAS_PREFIX.match(n) or _BLAS_FORTRAN.match(n)})


class KnownLibraries:
    """The shared libraries installed where the judge can name them (torch's own folder, every
    site-packages folder's wheels and their bundled `*.libs`, the system's library folders), indexed
    by size; a file's content is hashed only when another of its size exists."""

    def __init__(self, folders: list[str] | None = None):
        self.folders = folders if folders is not None else default_folders()
        self._by_size: dict[int, list[str]] | None = None
        self._hashes: dict[str, str | None] = {}

    def same_as(self, path: str) -> str | None:
        """An installed library with exactly the content of the file at `path`, or None."""
        try:
            size = os.stat(path).st_size
        except OSError:
            return None
        for known in self._index().get(size, []):
            if os.path.realpath(known) == os.path.realpath(path):
                continue
            digest = self._digest(known)
            if digest is not None and digest == self._digest(path):
                return known
        return None

    def _index(self) -> dict[int, list[str]]:
        if self._by_size is None:
            self._by_size = {}
            for folder in self.folders:
                for entry in _shared_objects(folder):
                    self._by_size.setdefault(entry[1], []).append(entry[0])
        return self._by_size

    def _digest(self, path: str) -> str | None:
        if path not in self._hashes:
            try:
                with open(path, "rb") as f:
                    self._hashes[path] = hashlib.file_digest(f, "sha256").hexdigest()
            except OSError:
                self._hashes[path] = None
        return self._hashes[path]


def _shared_objects(folder: str, depth: int = 1) -> list[tuple[str, int]]:
    """(path, size) of the regular files in `folder` named like shared objects, and in its
    subfolders down to `depth` (a site-packages folder's `numpy.libs`, `torch/lib`)."""
    found: list[tuple[str, int]] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False) and (entry.name.endswith(".so") or ".so." in entry.name):
                found.append((entry.path, entry.stat(follow_symlinks=False).st_size))
            elif depth > 0 and entry.is_dir(follow_symlinks=False):
                found += _shared_objects(entry.path, depth - 1)
        except OSError:
            continue
    return found


def default_folders() -> list[str]:
    folders = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    try:
        import torch

        folders.append(str(Path(torch.__file__).parent / "lib"))
    except ImportError:
        pass
    folders += ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
                "/usr/lib64", "/usr/lib", "/usr/local/lib"]
    return [f for f in dict.fromkeys(folders) if os.path.isdir(f)]


def identify(path: str, known: KnownLibraries) -> tuple[str, str] | None:
    """(kind, what it is) for a file that is not what its name or place says: a BLAS by its entry
    points, or a copy of an installed library (kind "blas", "torch" or "library"); None otherwise."""
    from agentforge.evaluator.judge.native_sampler import classify

    names = defined_symbols(path)
    points = blas_entry_points(names or [])
    if len(points) >= BLAS_MIN_SYMBOLS:
        return "blas", f"defines {len(points)} BLAS/LAPACK entry points ({', '.join(points[:4])}, ...)"
    original = known.same_as(path)
    if original is not None:
        kind = classify(original, ())
        return (kind if kind in ("blas", "torch") else "library"), f"a copy of {original}"
    return None
