"""A mapped file is named by what it holds, not by the name the candidate gave it
(`evaluator/judge/library_identity.py`): a BLAS by its entry points, a copy of an installed library by its
bytes. Real files: numpy's bundled OpenBLAS, the interpreter's own extension modules."""

from __future__ import annotations

import _ctypes
import shutil
from pathlib import Path

import numpy
import pytest
from agentforge.evaluator.judge import library_identity
from agentforge.evaluator.judge.library_identity import KnownLibraries, blas_entry_points, defined_symbols, identify


def _bundled_blas() -> Path:
    folder = Path(numpy.__file__).parent.parent / "numpy.libs"
    found = sorted(folder.glob("*openblas*.so*")) if folder.is_dir() else []
    if not found:
        pytest.skip("this numpy wheel bundles no OpenBLAS")
    return found[0]


def test_a_blas_is_named_by_its_entry_points_under_any_name(tmp_path: Path) -> None:
    copy = tmp_path / "tile_helpers.so"
    shutil.copyfile(_bundled_blas(), copy)
    points = blas_entry_points(defined_symbols(str(copy)) or [])
    assert any("gemm" in p for p in points), points[:10]
    kind, what = identify(str(copy), KnownLibraries(folders=[]))
    assert kind == "blas" and "BLAS/LAPACK entry points" in what


def test_a_copy_of_an_installed_library_is_named_by_its_bytes(tmp_path: Path) -> None:
    installed = tmp_path / "site" / "libsomeblas.so"
    installed.parent.mkdir()
    source = Path(_ctypes.__file__)  # an ELF with no BLAS entry points
    shutil.copyfile(source, installed)
    copy = tmp_path / "cache" / "kernel_helpers.so"
    copy.parent.mkdir()
    shutil.copyfile(source, copy)
    known = KnownLibraries(folders=[str(installed.parent)])
    assert known.same_as(str(copy)) == str(installed)
    kind, what = identify(str(copy), known)
    assert kind == "blas" and what == f"a copy of {installed}"  # the kind its original's name says


def test_the_candidates_own_build_stays_its_own(tmp_path: Path) -> None:
    """An extension module (here the interpreter's own, standing for a candidate's build): no BLAS entry
    points, and no installed library with its bytes in the folders searched."""
    own = tmp_path / "kernel.so"
    shutil.copyfile(_ctypes.__file__, own)
    names = defined_symbols(str(own))
    assert names and any(n.startswith("PyInit_") for n in names)
    assert not blas_entry_points(names)
    assert identify(str(own), KnownLibraries(folders=[str(tmp_path / "nothing")])) is None


@pytest.mark.parametrize("content", [b"", b"#!/bin/sh\necho not an ELF\n", b"\x7fELF\x01\x01" + b"\0" * 58])
def test_what_is_not_a_64_bit_elf_has_no_symbols(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "odd.so"
    path.write_bytes(content)
    assert defined_symbols(str(path)) is None
    assert identify(str(path), KnownLibraries(folders=[])) is None


@pytest.mark.parametrize(("name", "blas"), [
    ("cblas_sgemm", True), ("sgemm_", True), ("dgemm_64_", True), ("scipy_sgemm_64_", True), ("LAPACKE_sgesv", True),
    ("sgemm", False), ("my_sgemm_", False), ("relu_kernel", False), ("_ZN3c1010TensorImpl4sizeEv", False),
])
def test_blas_entry_point_names(name: str, blas: bool) -> None:
    assert bool(library_identity.blas_entry_points([name])) == blas
