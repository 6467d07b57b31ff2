"""H100 reference kernel for level2/add_rms_norm: total = x + residual (bf16), then
RMSNorm(total) * w in fp32, returning (normed bf16, total bf16), as between Llama decoder blocks.

One block per row. Sweep 1 reads x and residual once (16-byte accesses, 8 bf16), forms the bf16
sum exactly as PyTorch rounds it, writes it as the `total` output and accumulates its sum of
squares; sweep 2 re-reads the row's `total` (just written by the same thread, an L1/L2 hit) and
writes bf16((total * rsqrt(mean(total^2) + eps)) * w). DRAM traffic is the minimum: two reads,
two writes. The weight may be bf16 or fp32 (the evaluator loads the reference's bf16 weights into
this module's fp32 parameter). Rows whose length is not a multiple of 8 take an element-wise path.
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

// Plain (coherent) 16-byte load of values this kernel wrote earlier: not the read-only path.
__device__ __forceinline__ void load8_written(const __nv_bfloat16* p, float* v) {
    uint4 raw = *reinterpret_cast<const uint4*>(p);
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
    #pragma unroll
    for (int k = 0; k < 4; ++k) { float2 f = __bfloat1622float2(h[k]); v[2 * k] = f.x; v[2 * k + 1] = f.y; }
}

template <typename W, bool VEC>
__global__ void __launch_bounds__(BLOCK) add_rms_norm_rows(const __nv_bfloat16* __restrict__ x,
                                                           const __nv_bfloat16* __restrict__ res,
                                                           const W* __restrict__ w, __nv_bfloat16* __restrict__ out,
                                                           __nv_bfloat16* total, long cols, float eps) {
    __shared__ float scratch[32];
    const long row = (long)blockIdx.x * cols;
    float ss = 0.0f;
    if (VEC) {
        for (long j = 8L * threadIdx.x; j < cols; j += 8L * BLOCK) {
            float a[8], b[8];
            load8(x + row + j, a);
            load8(res + row + j, b);
            uint4 raw;
            __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
            #pragma unroll
            for (int k = 0; k < 4; ++k) {
                h[k] = __floats2bfloat162_rn(a[2 * k] + b[2 * k], a[2 * k + 1] + b[2 * k + 1]);  // bf16 add
                float2 t = __bfloat1622float2(h[k]);
                ss += t.x * t.x + t.y * t.y;
            }
            *reinterpret_cast<uint4*>(total + row + j) = raw;  // kept in cache for sweep 2
        }
    } else {
        for (long j = threadIdx.x; j < cols; j += BLOCK) {
            __nv_bfloat16 t = __float2bfloat16_rn(__bfloat162float(x[row + j]) + __bfloat162float(res[row + j]));
            total[row + j] = t;
            float tf = __bfloat162float(t);
            ss += tf * tf;
        }
    }
    const float scale = rsqrtf(block_sum(ss, scratch) / (float)cols + eps);
    if (VEC) {
        for (long j = 8L * threadIdx.x; j < cols; j += 8L * BLOCK) {
            float t[8], g[8];
            load8_written(total + row + j, t);
            load8(w + j, g);
            #pragma unroll
            for (int k = 0; k < 8; ++k) t[k] = (t[k] * scale) * g[k];
            store8(out + row + j, t);
        }
    } else {
        for (long j = threadIdx.x; j < cols; j += BLOCK)
            out[row + j] = __float2bfloat16_rn((__bfloat162float(total[row + j]) * scale) * to_f(w[j]));
    }
}

template <typename W>
static void launch_typed(const void* x, const void* r, const void* w, void* out, void* total, long rows, long cols,
                         float eps, cudaStream_t stream) {
    bool vec = cols % 8 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)r % 16 == 0 && (uintptr_t)w % 16 == 0
               && (uintptr_t)out % 16 == 0 && (uintptr_t)total % 16 == 0;
    const __nv_bfloat16* xb = (const __nv_bfloat16*)x;
    const __nv_bfloat16* rb = (const __nv_bfloat16*)r;
    if (vec) add_rms_norm_rows<W, true><<<(unsigned)rows, BLOCK, 0, stream>>>(
        xb, rb, (const W*)w, (__nv_bfloat16*)out, (__nv_bfloat16*)total, cols, eps);
    else add_rms_norm_rows<W, false><<<(unsigned)rows, BLOCK, 0, stream>>>(
        xb, rb, (const W*)w, (__nv_bfloat16*)out, (__nv_bfloat16*)total, cols, eps);
}

int launch_add_rms_norm(const void* x, const void* r, const void* w, void* out, void* total, long rows, long cols,
                        float eps, int w_bf16, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return 0;
    if (w_bf16) launch_typed<__nv_bfloat16>(x, r, w, out, total, rows, cols, eps, stream);
    else launch_typed<float>(x, r, w, out, total, rows, cols, eps, stream);
    return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

int launch_add_rms_norm(const void* x, const void* r, const void* w, void* out, void* total, long rows, long cols,
                        float eps, int w_bf16, cudaStream_t stream);

std::vector<torch::Tensor> forward(torch::Tensor x, torch::Tensor residual, torch::Tensor w, double eps) {
    TORCH_CHECK(x.is_cuda() && residual.is_cuda() && w.is_cuda(), "add_rms_norm: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kBFloat16 && residual.scalar_type() == at::kBFloat16,
                "add_rms_norm: expected bfloat16 activations");
    TORCH_CHECK(w.scalar_type() == at::kBFloat16 || w.scalar_type() == at::kFloat,
                "add_rms_norm: expected a bfloat16 or float32 weight");
    TORCH_CHECK(x.sizes() == residual.sizes() && x.size(-1) == w.numel(), "add_rms_norm: shapes do not match");
    auto xc = x.contiguous();
    auto rc = residual.contiguous();
    auto wc = w.contiguous();
    auto out = torch::empty_like(xc);
    auto total = torch::empty_like(xc);
    long cols = xc.size(-1);
    long rows = cols == 0 ? 0 : xc.numel() / cols;
    int err = launch_add_rms_norm(xc.data_ptr(), rc.data_ptr(), wc.data_ptr(), out.data_ptr(), total.data_ptr(), rows,
                                  cols, (float)eps, wc.scalar_type() == at::kBFloat16,
                                  c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "add_rms_norm: kernel launch failed: ", cudaGetErrorString((cudaError_t)err));
    return {out, total};
}
"""

_ext = load_inline(name="add_rms_norm_h100", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        out, total = _ext.forward(x, residual, self.weight.detach(), self.eps)
        return out, total
