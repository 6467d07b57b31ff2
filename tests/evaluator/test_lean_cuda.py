"""The lean CUDA path (`native.load_cuda`): the cubin cache under a second name, and kernel
arguments typed by the kernel's own signature (issue 15, finding 5)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from agentforge.evaluator import build_cache, native

SOURCE = r"""
extern "C" __global__ void __launch_bounds__(256) scale(const float* __restrict__ x, float* y, int n,
                                                        float alpha, long long stride, const unsigned flags) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i * stride] = alpha * x[i] + (float)flags;
}
extern "C" __global__ void noop() {}
"""


def test_signatures_give_each_scalar_parameter_its_c_type() -> None:
    signatures = native.kernel_signatures(SOURCE)
    assert signatures["scale"] == (None, None, "int32", "float32", "int64", "uint32")
    assert signatures["noop"] == ()


def test_python_numbers_become_the_declared_types_and_the_rest_passes_unchanged() -> None:
    types = native.kernel_signatures(SOURCE)["scale"]
    pointer = 140_000_000_000
    args = native.typed_args([pointer, pointer + 64, 1000, 2.5, 3, 1], types)
    assert args[0] == pointer and type(args[0]) is int  # a data_ptr() stays a 64-bit pointer
    assert type(args[2]) is np.int32 and args[2] == 1000
    assert type(args[3]) is np.float32 and type(args[4]) is np.int64 and type(args[5]) is np.uint32
    explicit = native.typed_args([0, 0, np.int64(7)], types)
    assert type(explicit[2]) is np.int64  # an explicit numpy scalar is the candidate's choice


@pytest.mark.skipif(shutil.which("nvcc") is None and not __import__("os").path.exists("/usr/local/cuda/bin/nvcc"),
                    reason="needs nvcc")
def test_the_same_source_under_a_second_name_finds_the_cached_cubin(tmp_path) -> None:
    build_cache.set_cache_root(tmp_path)
    try:
        ok, _, first = native.cuda_cubin("first_name", SOURCE, "sm_90a")
        assert ok and first.is_file()
        ok, _, second = native.cuda_cubin("second_name", SOURCE, "sm_90a")
        assert ok and second.is_file() and second == first  # one build, found whatever its file's name
    finally:
        build_cache.set_cache_root(None)
