"""The source rewrite (no compiler): launches, launch bounds, shared memory, torch's device checks,
and the constructs that need a GPU named with their line."""

from __future__ import annotations

import pytest
from agentforge.evaluator.cuda_emulation.rewrite import NeedsGpu, needs_fibers, rewrite


def test_a_launch_becomes_a_launcher_call_with_its_arguments_evaluated_once() -> None:
    out = rewrite("void f(float* x, int n, cudaStream_t s) {\n  ns::k<float, 4><<<dim3(n, 2), 128, n * 4, s>>>(\n"
                  "      x, n);\n  g<<<1, 32>>>();\n}\n")
    assert ("::emu::launch(dim3(n, 2), 128, (size_t)(n * 4), (cudaStream_t)(s), [&](auto&... afemu_a) "
            "{ ns::k<float, 4>(afemu_a...); }, x, n)") in out
    assert "::emu::launch(1, 32, (size_t)(0), (cudaStream_t)(nullptr), [&](auto&... afemu_a) { g(afemu_a...); })" in out
    assert out.count("\n") == 5  # line numbers kept for the compiler's messages


def test_launch_bounds_and_shared_memory() -> None:
    out = rewrite("__global__ void __launch_bounds__(256, 2) k(float* y) {\n"
                  "  __shared__ float a[32], b[4][8];\n  extern __shared__ __align__(16) float dyn[];\n}\n"
                  "extern __shared__ char pool[];\n")
    assert "{ if (::emu::launch_bounds_exceeded(256, 2)) return;" in out
    flat = " ".join(out.split())
    assert ("using afemu_st_a = float [32]; "
            "afemu_st_a& a = ::emu::static_shared<afemu_st_a>(&afemu_sk_a, (size_t)(0));") in flat
    assert "using afemu_st_b = float [4][8];" in flat
    assert "float* dyn = reinterpret_cast<float*>(::emu::dynamic_smem());" in out
    assert "#define pool (reinterpret_cast<char*>(::emu::dynamic_smem()))" in out


def test_each_shared_declarator_gets_its_guarded_slot() -> None:
    out = " ".join(rewrite("template <class T> __device__ void f() {\n"
                           "  __shared__ __align__(16) float a[32], *b[4];\n  __shared__ typename R<T, 3>::Tmp t;\n}\n"
                           "__shared__ int at_namespace_scope[2];\n").split())
    assert ("using afemu_st_a = float [32]; "
            "afemu_st_a& a = ::emu::static_shared<afemu_st_a>(&afemu_sk_a, (size_t)(16));") in out
    assert "using afemu_st_b = float * [4];" in out and "using afemu_st_t = typename R<T, 3>::Tmp ;" in out
    assert "__shared__ int at_namespace_scope[2];" in out  # a plain static, as before


@pytest.mark.parametrize(("source", "fibers"), [
    ("__global__ void k(float* y) { y[threadIdx.x] = 1; }", False),
    ("// __syncthreads() in a comment only\n__global__ void k(float* y) { y[0] = atomicAdd(y, 1); }", False),
    ("__global__ void k(float* y) { __syncthreads(); }", True),
    ("#define SYNC __syncwarp()\n", True),
    ("float v = __shfl_down_sync(0xffffffffu, x, 1);", True),
    ("unsigned b = __ballot_sync(m, p);", True),
    ("namespace cg = cooperative_groups; cg::this_thread_block().sync();", True),
    ('#include "my_reductions.cuh"', True),  # a header of the candidate's may hold a barrier
])
def test_only_barrier_free_modules_take_the_plain_call_path(source: str, fibers: bool) -> None:
    assert needs_fibers([source]) is fibers
    launch = rewrite("void f(float* y) { k<<<1, 32>>>(y); }", plain=not fibers)
    assert ("::emu::launch<true>(" in launch) is not fibers


def test_torch_device_checks_name_the_cpu() -> None:
    out = rewrite('TORCH_CHECK(x.is_cuda(), "x"); auto o = torch::empty({1}, x.options().device(torch::kCUDA));'
                  " if (x.device().type() == c10::DeviceType::CUDA) {}")
    assert "x.is_cpu()" in out and "torch::kCPU" in out and "DeviceType::CPU" in out and "CUDA)" not in out


@pytest.mark.parametrize(("source", "construct"), [
    ('__device__ int lane() {\n  int l; asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));\n}', "inline PTX"),
    ("#include <mma.h>\nusing namespace nvcuda;\nwmma::fragment<wmma::matrix_a, 16, 16, 16, half> a;", "wmma"),
    ("__pipeline_memcpy_async(dst, src, 16);", "cp.async"),
    ("CUtensorMap map;", "TMA"),
    ("__global__ void __cluster_dims__(2, 1, 1) k() {}", "clusters"),
])
def test_what_needs_a_gpu_is_named_with_its_line(source: str, construct: str) -> None:
    with pytest.raises(NeedsGpu) as caught:
        rewrite("// asm( in a comment does not count\n" + source)
    assert construct in str(caught.value) and "needs a GPU" in str(caught.value)
    assert caught.value.line >= 2
