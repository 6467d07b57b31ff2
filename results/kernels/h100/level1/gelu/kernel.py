"""H100 reference kernel for level1/gelu (exact erf GELU, fp32): one streaming pass.

Each thread moves UNROLL 16-byte vectors (float4) per step, spaced BLOCK apart so every warp
access is coalesced, with streaming cache hints (the data is touched once); a scalar path covers
the tail (n % 4) and misaligned views. GELU is x * erfc(-x / sqrt 2) / 2 with CUDA's precise erfcf (IEEE-exact build flags): no cancellation in 1 + erf for negative x, no tanh approximation.
Built with `load_inline`: the kernel and its launcher are plain CUDA (no torch headers, so nvcc
compiles them in seconds); the host wrapper in `cpp_sources` checks the tensor and launches on
PyTorch's current stream.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 256  # threads per block
UNROLL = 4  # float4 vectors per thread (independent loads in flight)
TUNABLES = {"BLOCK": [128, 256, 512], "UNROLL": [1, 2, 4, 8]}

CUDA_SRC = f"#define BLOCK {BLOCK}\n#define UNROLL {UNROLL}\n" + r"""
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float op(float v) {
    return 0.5f * v * erfcf(-v * 0.70710678118654752f);  // x * Phi(x); no tanh approximation
}

__global__ void __launch_bounds__(BLOCK) gelu_vec4(const float4* __restrict__ x, float4* __restrict__ y, long n4) {
    long base = (long)blockIdx.x * BLOCK * UNROLL + threadIdx.x;
    float4 v[UNROLL];
    #pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        long i = base + (long)u * BLOCK;
        if (i < n4) v[u] = __ldcs(x + i);
    }
    #pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        long i = base + (long)u * BLOCK;
        if (i < n4) {
            float4 r;
            r.x = op(v[u].x); r.y = op(v[u].y); r.z = op(v[u].z); r.w = op(v[u].w);
            __stcs(y + i, r);
        }
    }
}

__global__ void __launch_bounds__(BLOCK) gelu_scalar(const float* __restrict__ x, float* __restrict__ y, long begin, long n) {
    for (long i = begin + (long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long)gridDim.x * BLOCK) y[i] = op(x[i]);
}

int launch_gelu(const float* x, float* y, long n, cudaStream_t stream) {
    if (n == 0) return 0;
    bool aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0);
    long n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        long per_block = (long)BLOCK * UNROLL;
        gelu_vec4<<<(unsigned)((n4 + per_block - 1) / per_block), BLOCK, 0, stream>>>(
            (const float4*)x, (float4*)y, n4);
    }
    long rest = n - 4 * n4;
    if (rest > 0) {
        long blocks = (rest + BLOCK - 1) / BLOCK;
        gelu_scalar<<<(unsigned)(blocks < 65535 ? blocks : 65535), BLOCK, 0, stream>>>(x, y, 4 * n4, n);
    }
    return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

int launch_gelu(const float* x, float* y, long n, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "gelu: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "gelu: expected float32, got ", x.scalar_type());
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int err = launch_gelu(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
                          c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "gelu: kernel launch failed: ", cudaGetErrorString((cudaError_t)err));
    return y;
}
"""

_ext = load_inline(name="gelu_h100", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.forward(x)
