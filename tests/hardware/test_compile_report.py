"""The compiler report: real nvcc on this machine (sm_90a cubins need no GPU), canned ptxas and
SASS listings for the formats other CUDA versions print."""

from __future__ import annotations

import pytest
from agentforge.evaluator.hardware import compile_report as cr

NVCC = cr.find_cuda_tool("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
HAS_DISASSEMBLER = cr.find_cuda_tool("cuobjdump") is not None or cr.find_cuda_tool("nvdisasm") is not None
needs_disassembler = pytest.mark.skipif(
    not HAS_DISASSEMBLER, reason="no cuobjdump/nvdisasm (pip install nvidia-cuda-cuobjdump, see docs/hardware.md)")

KERNELS = r"""
#include <mma.h>
using namespace nvcuda;

__global__ void smem_kernel(const float* __restrict__ x, float* y, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.f;
  __syncthreads();
  if (i < n) y[i] = tile[255 - threadIdx.x] * 2.f;
}

__global__ void local_kernel(const int* idx, float* y, int n) {
  float buf[512];  // indexed at run time: lives in local memory
  for (int j = 0; j < 512; ++j) buf[j] = j * 0.5f + n;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = buf[idx[i] & 511];
}

__global__ void vec_kernel(const float4* __restrict__ x, float4* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float4 v = x[i]; v.x += 1.f; y[i] = v; }
}

__global__ void wmma_kernel(const half* a, const half* b, float* c) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
  wmma::fill_fragment(fc, 0.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(fc, fa, fb, fc);
  wmma::store_matrix_sync(c, fc, 16, wmma::mem_row_major);
}
"""

SPILLER = r"""
__global__ void spill_kernel(const float* x, float* y, int n) {
  float acc[64];
  #pragma unroll
  for (int j = 0; j < 64; ++j) acc[j] = x[threadIdx.x + j * n];
  #pragma unroll
  for (int r = 0; r < 8; ++r)
    #pragma unroll
    for (int j = 0; j < 64; ++j) acc[j] = acc[j] * acc[(j + r + 1) & 63] + 1.0f;
  float s = 0;
  #pragma unroll
  for (int j = 0; j < 64; ++j) s += acc[j];
  y[threadIdx.x] = s;
}
"""


@pytest.fixture(scope="module")
def report() -> cr.CudaCompileReport:
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    return cr.compile_cuda_report(KERNELS, arch="sm_90a")


def _by_prefix(resources, prefix: str):
    return next(r for r in resources if r.name.startswith(prefix))


@needs_nvcc
def test_resources_per_kernel(report) -> None:
    ok, log, resources, _ = report
    assert ok, log
    assert "Used" in log and len(resources) == 4
    smem = _by_prefix(resources, "smem_kernel")
    assert smem.shared_bytes == 256 * 4 and 0 < smem.registers <= 255
    assert smem.spill_store_bytes == 0 and smem.stack_bytes == 0
    local = _by_prefix(resources, "local_kernel")
    assert local.stack_bytes >= 512 * 4 and local.shared_bytes == 0


@needs_nvcc
def test_names_are_demangled_when_a_demangler_exists(report) -> None:
    import shutil

    if cr.find_cuda_tool("cu++filt") is None and shutil.which("c++filt") is None:
        pytest.skip("no c++filt / cu++filt")
    names = {r.name for r in report.resources}
    assert "smem_kernel(float const*, float*, int)" in names
    assert "vec_kernel(float4 const*, float4*, int)" in names


@needs_nvcc
@needs_disassembler
def test_sass_histogram_shows_what_the_kernels_do(report) -> None:
    hist = report.histogram
    assert hist and "NOP" not in hist
    facts = cr.summarize_sass(hist)
    assert facts["local_memory"] and facts["local_memory_ops"] > 0  # buf[512] in local_kernel
    assert any(op.startswith("LDG.E.128") for op in hist) and facts["global_loads_128bit"] >= 1  # float4
    assert facts["tensor_cores"] and any(op.startswith("HMMA") for op in hist)  # wmma
    assert facts["barriers"] >= 1 and facts["shared_memory_ops"] >= 2  # __syncthreads, tile[]
    assert not facts["warpgroup_mma"] and facts["fp64_ops"] == 0


@needs_nvcc
def test_spills_under_a_register_cap(tmp_path) -> None:
    ok, log, resources, hist = cr.compile_cuda_report(SPILLER, extra_flags=("-maxrregcount=32",),
                                                      workdir=tmp_path)
    assert ok, log
    (spill,) = resources
    assert spill.registers <= 32 and spill.spill_store_bytes > 0 and spill.spill_load_bytes > 0
    assert (tmp_path / "kernel.cubin").is_file()
    if hist:
        assert cr.summarize_sass(hist)["local_memory"]


@needs_nvcc
def test_compile_error_is_a_value() -> None:
    ok, log, resources, hist = cr.compile_cuda_report("__global__ void broken( { }")
    assert not ok and "error" in log.lower() and resources == () and hist == {}


def test_torch_extension_flags_point_at_real_headers() -> None:
    from pathlib import Path

    flags = cr.torch_extension_flags()
    includes = [Path(f[2:]) for f in flags if f.startswith("-I")]
    assert any((p / "torch" / "extension.h").is_file() for p in includes)
    assert any((p / "Python.h").is_file() for p in includes)
    assert "-std=c++17" in flags


def test_missing_nvcc_is_a_value(tmp_path) -> None:
    ok, log, resources, hist = cr.compile_cuda_report("", nvcc=str(tmp_path / "nvcc"))
    assert not ok and "nvcc not found" in log and resources == () and hist == {}


def test_find_cuda_tool_explicit_path(tmp_path) -> None:
    assert cr.find_cuda_tool("nvcc", tool_path=str(tmp_path / "missing")) is None
    tool = tmp_path / "cuobjdump"
    tool.write_text("")
    assert cr.find_cuda_tool("cuobjdump", tool_path=str(tool)) == str(tool)
    assert cr.find_cuda_tool("surely-not-a-cuda-tool-name") is None


OLD_PTXAS = """\
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for _Z6helperf
    24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function '_Z6kernelPf' for 'sm_80'
ptxas info    : Function properties for _Z6kernelPf
    8 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 40 registers, 2048 bytes smem, 368 bytes cmem[0], 4 bytes cmem[2]
ptxas info    : Compiling entry function '_Z6kernelPf' for 'sm_90a'
ptxas info    : Function properties for _Z6kernelPf
    8 bytes stack frame, 4 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 38 registers, used 1 barriers, 2048 bytes smem
"""


def test_parse_ptxas_older_format_and_two_architectures() -> None:
    resources = cr.parse_ptxas(OLD_PTXAS)
    assert [r.name for r in resources] == ["_Z6kernelPf [sm_80]", "_Z6kernelPf [sm_90a]"]
    sm80, sm90 = resources
    assert (sm80.registers, sm80.shared_bytes, sm80.constant_bytes) == (40, 2048, 372)
    assert (sm80.stack_bytes, sm80.spill_store_bytes, sm80.spill_load_bytes) == (8, 4, 8)
    assert sm90.registers == 38 and sm90.constant_bytes is None  # the helper device function is no kernel


CUOBJDUMP = """\
\tcode for sm_90a
\t\tFunction : _Z1kPf
        /*0000*/                   LDC R1, c[0x0][0x28] ;                      /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 BRA 0x80 ;                                  /* 0x0000000000000947 */
        /*0020*/               @P1 LDG.E.128 R4, desc[UR4][R2.64] ;            /* 0x0000000402047981 */
        /*0030*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ ;
        /*0040*/                   UTMALDG.2D [UR8], [UR4] ;
        /*0050*/                   NOP ;
\t\tFunction : _Z1gPf
        /*0000*/                   LDG.E R0, desc[UR4][R2.64] ;
        /*0010*/                   EXIT ;
"""

NVDISASM = """\
.text._Z1kPf:
        /*0000*/                   STL [R1], R0 ;
        /*0010*/                   LDL R0, [R1] ;
        /*0020*/                   LDGSTS.E.BYPASS.128 [R3], desc[UR4][R4.64] ;
        /*0030*/                   DFMA R2, R4, R6, R2 ;
"""


def test_parse_sass_cuobjdump_listing() -> None:
    assert cr.parse_sass_by_function(CUOBJDUMP) == {
        "_Z1kPf": {"LDC": 1, "BRA": 1, "LDG.E.128": 1, "HGMMA.64x128x16.F32.BF16": 1, "UTMALDG.2D": 1},
        "_Z1gPf": {"LDG.E": 1, "EXIT": 1},
    }
    facts = cr.summarize_sass(cr.parse_sass(CUOBJDUMP))
    assert facts["tensor_cores"] and facts["warpgroup_mma"] and facts["tma"]
    assert facts["global_loads"] == 2 and facts["global_loads_128bit"] == 1 and facts["vectorized_loads"]
    assert not facts["local_memory"] and facts["instructions"] == 7


def test_parse_sass_nvdisasm_listing() -> None:
    facts = cr.summarize_sass(cr.parse_sass(NVDISASM))
    assert facts["local_memory_ops"] == 2 and facts["async_copy"] and facts["fp64_ops"] == 1
    assert not facts["tensor_cores"] and not facts["vectorized_loads"]
