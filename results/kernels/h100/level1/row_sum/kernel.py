"""H100 reference kernel for level1/row_sum (fp32 rows -> one fp32 value per row): the sum over the last dimension.

One streaming read of the input (float4 loads with evict-first hints when rows are 16-byte
aligned, scalar otherwise); each thread keeps its own fp32 partial sum, then a shuffle tree
reduces them, so rows of 10^4-10^5 terms round like a pairwise sum. Rows longer than WARP_COLS
get a block of BLOCK threads each; shorter rows a warp each (a 1048576 x 128 input still fills
the GPU).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 256  # threads per block for long rows
WARP_COLS = 1024  # rows up to this long get one warp each
WARPS_PER_BLOCK = 8  # rows per block in the warp-per-row kernel
TUNABLES = {"BLOCK": [128, 256, 512], "WARP_COLS": [512, 1024, 2048], "WARPS_PER_BLOCK": [4, 8]}

CUDA_SRC = f"#define BLOCK {BLOCK}\n#define WARP_COLS {WARP_COLS}\n#define WARPS_PER_BLOCK {WARPS_PER_BLOCK}\n" + r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

// Warp and block reductions (fp32). `block_reduce_*` must be called by every thread of the block;
// the result is returned to all of them. `scratch` holds one float per warp.
__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read by a previous reduction
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : 0.f;
    return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = lane < warps ? scratch[lane] : -INFINITY;
    return warp_max(v);
}

__device__ __forceinline__ float term(float v) { return v; }
__device__ __forceinline__ float finish(float s) { return s; }

template <bool VEC>
__device__ __forceinline__ float row_partial(const float* __restrict__ xr, long cols, int lane, int lanes) {
    float acc = 0.0f;
    if (VEC) {
        const float4* x4 = reinterpret_cast<const float4*>(xr);
        for (long j = lane; j < cols / 4; j += lanes) {
            float4 v = __ldcs(x4 + j);
            acc += (term(v.x) + term(v.y)) + (term(v.z) + term(v.w));
        }
    } else {
        for (long j = lane; j < cols; j += lanes) acc += term(__ldcs(xr + j));
    }
    return acc;
}

template <bool VEC>
__global__ void __launch_bounds__(BLOCK) row_sum_block_rows(const float* __restrict__ x, float* __restrict__ y, long cols) {
    __shared__ float scratch[32];
    float s = block_sum(row_partial<VEC>(x + (long)blockIdx.x * cols, cols, threadIdx.x, BLOCK), scratch);
    if (threadIdx.x == 0) y[blockIdx.x] = finish(s);
}

template <bool VEC>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32) row_sum_warp_rows(const float* __restrict__ x, float* __restrict__ y,
                                                                        long rows, long cols) {
    long row = (long)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int lane = threadIdx.x & 31;
    float s = warp_sum(row_partial<VEC>(x + row * cols, cols, lane, 32));
    if (lane == 0) y[row] = finish(s);
}

int launch_row_sum(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
    if (rows == 0) return 0;
    bool vec = cols % 4 == 0 && ((uintptr_t)x % 16 == 0);
    if (cols <= WARP_COLS) {
        unsigned blocks = (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
        if (vec) row_sum_warp_rows<true><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(x, y, rows, cols);
        else row_sum_warp_rows<false><<<blocks, WARPS_PER_BLOCK * 32, 0, stream>>>(x, y, rows, cols);
    } else {
        if (vec) row_sum_block_rows<true><<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols);
        else row_sum_block_rows<false><<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols);
    }
    return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

int launch_row_sum(const float* x, float* y, long rows, long cols, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "row_sum: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "row_sum: expected float32, got ", x.scalar_type());
    TORCH_CHECK(x.dim() >= 1, "row_sum: expected at least one dimension");
    auto xc = x.contiguous();
    auto sizes = xc.sizes().vec();
    long cols = sizes.back();
    sizes.pop_back();
    auto y = torch::empty(sizes, xc.options());
    int err = launch_row_sum(xc.data_ptr<float>(), y.data_ptr<float>(), y.numel(), cols,
                            c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "row_sum: kernel launch failed: ", cudaGetErrorString((cudaError_t)err));
    return y;
}
"""

_ext = load_inline(name="row_sum_h100", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.forward(x)
