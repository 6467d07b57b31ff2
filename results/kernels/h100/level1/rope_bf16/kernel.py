"""H100 reference kernel for level1/rope_bf16: rotary position embedding of a (tokens, heads,
head_dim) bf16 tensor at arbitrary int64 positions, angles in fp32.

One block per token. Its threads first compute the token's head_dim / 2 (cos, sin) pairs into
shared memory, once for all heads, following the reference's fp32 steps exactly:
inv_freq = 1 / theta^((2i) / dim), angle = float(pos) * inv_freq, then the precise sincosf (full
range reduction, so positions of 10^5 are fine). Then every (head, pair of frequencies) is
rotated with 4-byte bf16x2 accesses (x1 = first half, x2 = second half of the head):
out = [x1 cos - x2 sin, x2 cos + x1 sin]. Head dims that are not a multiple of 4 take a scalar
path; head_dim up to 2 * MAX_HALF.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 256  # threads per token
MAX_HALF = 256  # largest head_dim / 2 the shared-memory table holds
TUNABLES = {"BLOCK": [128, 256, 512]}

CUDA_SRC = f"#define BLOCK {BLOCK}\n#define MAX_HALF {MAX_HALF}\n" + r"""
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>

template <bool PAIRS>
__global__ void __launch_bounds__(BLOCK) rope_tokens(const __nv_bfloat16* __restrict__ x, const int64_t* __restrict__ pos,
                                                     __nv_bfloat16* __restrict__ out, int heads, int dim, float theta) {
    __shared__ float cos_t[MAX_HALF], sin_t[MAX_HALF];
    const int half = dim / 2;
    const float p = (float)pos[blockIdx.x];
    for (int i = threadIdx.x; i < half; i += BLOCK) {
        float inv_freq = 1.0f / powf(theta, (float)(2 * i) / (float)dim);
        float s, c;
        sincosf(p * inv_freq, &s, &c);
        cos_t[i] = c;
        sin_t[i] = s;
    }
    __syncthreads();
    const long base = (long)blockIdx.x * heads * dim;
    if (PAIRS) {  // two neighbouring frequencies per item: bf16x2 loads and stores
        const int pairs = half / 2;
        for (int item = threadIdx.x; item < heads * pairs; item += BLOCK) {
            int h = item / pairs, i = 2 * (item % pairs);
            long off = base + (long)h * dim + i;
            float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(x + off));
            float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(x + off + half));
            float c0 = cos_t[i], s0 = sin_t[i], c1 = cos_t[i + 1], s1 = sin_t[i + 1];
            *reinterpret_cast<__nv_bfloat162*>(out + off) = __floats2bfloat162_rn(a.x * c0 - b.x * s0, a.y * c1 - b.y * s1);
            *reinterpret_cast<__nv_bfloat162*>(out + off + half) = __floats2bfloat162_rn(b.x * c0 + a.x * s0, b.y * c1 + a.y * s1);
        }
    } else {
        for (int item = threadIdx.x; item < heads * half; item += BLOCK) {
            int h = item / half, i = item % half;
            long off = base + (long)h * dim + i;
            float a = __bfloat162float(x[off]), b = __bfloat162float(x[off + half]);
            out[off] = __float2bfloat16_rn(a * cos_t[i] - b * sin_t[i]);
            out[off + half] = __float2bfloat16_rn(b * cos_t[i] + a * sin_t[i]);
        }
    }
}

int launch_rope(const void* x, const int64_t* pos, void* out, long tokens, int heads, int dim, float theta,
                cudaStream_t stream) {
    if (tokens == 0 || heads == 0 || dim == 0) return 0;
    if (dim % 2 != 0 || dim / 2 > MAX_HALF) return (int)cudaErrorInvalidValue;
    bool pairs = dim % 4 == 0 && (uintptr_t)x % 4 == 0 && (uintptr_t)out % 4 == 0;
    if (pairs) rope_tokens<true><<<(unsigned)tokens, BLOCK, 0, stream>>>((const __nv_bfloat16*)x, pos,
                                                                        (__nv_bfloat16*)out, heads, dim, theta);
    else rope_tokens<false><<<(unsigned)tokens, BLOCK, 0, stream>>>((const __nv_bfloat16*)x, pos,
                                                                   (__nv_bfloat16*)out, heads, dim, theta);
    return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

int launch_rope(const void* x, const int64_t* pos, void* out, long tokens, int heads, int dim, float theta,
                cudaStream_t stream);

torch::Tensor forward(torch::Tensor x, torch::Tensor positions, double theta) {
    TORCH_CHECK(x.is_cuda() && positions.is_cuda(), "rope: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kBFloat16, "rope: expected bfloat16 x, got ", x.scalar_type());
    TORCH_CHECK(positions.scalar_type() == at::kLong, "rope: expected int64 positions");
    TORCH_CHECK(x.dim() == 3 && positions.dim() == 1 && positions.size(0) == x.size(0),
                "rope: expected x (tokens, heads, head_dim) and positions (tokens)");
    auto xc = x.contiguous();
    auto pc = positions.contiguous();
    auto out = torch::empty_like(xc);
    int err = launch_rope(xc.data_ptr(), pc.data_ptr<int64_t>(), out.data_ptr(), xc.size(0), (int)xc.size(1),
                          (int)xc.size(2), (float)theta, c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "rope: kernel launch failed (head_dim must be even and at most 512): ",
                cudaGetErrorString((cudaError_t)err));
    return out;
}
"""

_ext = load_inline(name="rope_h100", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, theta: float):
        super().__init__()
        self.theta = theta

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return _ext.forward(x, positions, self.theta)
