"""H100 reference kernel for level1/rms_norm (bf16 in and out, fp32 statistics): one fused kernel.

One block per row: each thread accumulates the sum of squares of its 8-element (16-byte) chunks,
a block reduction gives the row's scale, and a second sweep over the row (an L1/L2 hit: a row is
8-16 KB) writes bf16((x * rsqrt(mean(x^2) + eps)) * w) with evict-first stores. Eager PyTorch
spends six kernels and several fp32 round trips on this. Activations bf16 or fp32; weights bf16
or fp32 (the evaluator loads the bf16 weights into this module's fp32 parameter).
Rows whose length is not a multiple of 8 (or misaligned views) take the element-wise path.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 256  # threads per row
TUNABLES = {"BLOCK": [128, 256, 512, 1024]}

CUDA_SRC = f"#define BLOCK {BLOCK}\n" + r"""
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

// 8 consecutive values of a row as floats, and back. VEC: one 16-byte access for bf16 (two for
// fp32); otherwise element by element (rows whose length is not a multiple of 8, or misaligned).
__device__ __forceinline__ void load8(const __nv_bfloat16* p, float* v) {
    uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    #pragma unroll
    for (int k = 0; k < 4; ++k) { float2 f = __bfloat1622float2(h[k]); v[2 * k] = f.x; v[2 * k + 1] = f.y; }
}
__device__ __forceinline__ void load8(const float* p, float* v) {
    float4 a = __ldg(reinterpret_cast<const float4*>(p)), b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
__device__ __forceinline__ void store8(__nv_bfloat16* p, const float* v) {
    uint4 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
    #pragma unroll
    for (int k = 0; k < 4; ++k) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
    __stcs(reinterpret_cast<uint4*>(p), raw);
}
__device__ __forceinline__ void store8(float* p, const float* v) {
    __stcs(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
    __stcs(reinterpret_cast<float4*>(p) + 1, make_float4(v[4], v[5], v[6], v[7]));
}
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(float v) { return v; }
template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }

template <typename X, typename W, bool VEC>
__global__ void __launch_bounds__(BLOCK) rms_norm_rows(const X* __restrict__ x, const W* __restrict__ w, X* __restrict__ y,
                                                       long cols, float eps) {
    __shared__ float scratch[32];
    const X* xr = x + (long)blockIdx.x * cols;
    X* yr = y + (long)blockIdx.x * cols;
    float ss = 0.0f;
    if (VEC) {
        for (long j = 8L * threadIdx.x; j < cols; j += 8L * BLOCK) {
            float v[8];
            load8(xr + j, v);
            #pragma unroll
            for (int k = 0; k < 8; ++k) ss += v[k] * v[k];
        }
    } else {
        for (long j = threadIdx.x; j < cols; j += BLOCK) { float v = to_f(xr[j]); ss += v * v; }
    }
    const float scale = rsqrtf(block_sum(ss, scratch) / (float)cols + eps);
    if (VEC) {
        for (long j = 8L * threadIdx.x; j < cols; j += 8L * BLOCK) {
            float v[8], g[8];
            load8(xr + j, v);
            load8(w + j, g);
            #pragma unroll
            for (int k = 0; k < 8; ++k) v[k] = (v[k] * scale) * g[k];
            store8(yr + j, v);
        }
    } else {
        for (long j = threadIdx.x; j < cols; j += BLOCK) yr[j] = from_f<X>((to_f(xr[j]) * scale) * to_f(w[j]));
    }
}

template <typename X, typename W>
static void launch_typed(const void* x, const void* w, void* y, long rows, long cols, float eps, cudaStream_t stream) {
    bool vec = cols % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0 && (uintptr_t)w % 16 == 0;
    if (vec) rms_norm_rows<X, W, true><<<(unsigned)rows, BLOCK, 0, stream>>>((const X*)x, (const W*)w, (X*)y, cols, eps);
    else rms_norm_rows<X, W, false><<<(unsigned)rows, BLOCK, 0, stream>>>((const X*)x, (const W*)w, (X*)y, cols, eps);
}

// x_bf16 / w_bf16: 1 for bfloat16, 0 for float32.
int launch_rms_norm(const void* x, const void* w, void* y, long rows, long cols, float eps, int x_bf16, int w_bf16,
                    cudaStream_t stream) {
    if (rows == 0 || cols == 0) return 0;
    if (x_bf16 && w_bf16) launch_typed<__nv_bfloat16, __nv_bfloat16>(x, w, y, rows, cols, eps, stream);
    else if (x_bf16) launch_typed<__nv_bfloat16, float>(x, w, y, rows, cols, eps, stream);
    else if (w_bf16) launch_typed<float, __nv_bfloat16>(x, w, y, rows, cols, eps, stream);
    else launch_typed<float, float>(x, w, y, rows, cols, eps, stream);
    return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

int launch_rms_norm(const void* x, const void* w, void* y, long rows, long cols, float eps, int x_bf16, int w_bf16,
                    cudaStream_t stream);

torch::Tensor forward(torch::Tensor x, torch::Tensor w, double eps) {
    TORCH_CHECK(x.is_cuda() && w.is_cuda(), "rms_norm: expected CUDA tensors");
    auto ok = [](at::ScalarType t) { return t == at::kBFloat16 || t == at::kFloat; };
    TORCH_CHECK(ok(x.scalar_type()) && ok(w.scalar_type()), "rms_norm: expected bfloat16 or float32");
    TORCH_CHECK(x.size(-1) == w.numel(), "rms_norm: weight size ", w.numel(), " != hidden ", x.size(-1));
    auto xc = x.contiguous();
    auto wc = w.contiguous();
    auto y = torch::empty_like(xc);
    long cols = xc.size(-1);
    long rows = cols == 0 ? 0 : xc.numel() / cols;
    int err = launch_rms_norm(xc.data_ptr(), wc.data_ptr(), y.data_ptr(), rows, cols, (float)eps,
                              xc.scalar_type() == at::kBFloat16, wc.scalar_type() == at::kBFloat16,
                              c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "rms_norm: kernel launch failed: ", cudaGetErrorString((cudaError_t)err));
    return y;
}
"""

_ext = load_inline(name="rms_norm_h100", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.forward(x, self.weight.detach(), self.eps)
