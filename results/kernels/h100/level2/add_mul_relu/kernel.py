"""H100 reference kernel for level2/add_mul_relu (fp32): relu(x * y + z) * scale[col].

One fused pass: every input element is read once and the output written once (eager PyTorch
runs four kernels with intermediates in memory). Grid: (column chunks, rows), so the
per-column parameters are indexed without a division; each thread handles 16-byte (float4)
chunks when the row length is a multiple of 4 and the tensors are aligned, single elements
otherwise. Loads and stores of the streamed tensors carry evict-first hints; the small
per-column parameters stay cached. IEEE-exact math (precise erff, no approximations).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 256  # threads per block along a row
TUNABLES = {"BLOCK": [128, 256, 512]}

CUDA_SRC = f"#define BLOCK {BLOCK}\n" + r"""
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float op(float x, float y, float z, float s) {
    float t = x * y + z;  // contracted to one fma: one rounding fewer than eager
    return (t < 0.f ? 0.f : t) * s;
}

__global__ void __launch_bounds__(BLOCK) add_mul_relu_vec4(const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ z, const float* __restrict__ s, float* __restrict__ out, long cols) {
    long j = ((long)blockIdx.x * BLOCK + threadIdx.x) * 4;
    if (j >= cols) return;
    long off = (long)blockIdx.y * cols + j;
    float4 x4 = __ldcs(reinterpret_cast<const float4*>(x + off));
    float4 y4 = __ldcs(reinterpret_cast<const float4*>(y + off));
    float4 z4 = __ldcs(reinterpret_cast<const float4*>(z + off));
    float4 s4 = __ldg(reinterpret_cast<const float4*>(s + j));
    __stcs(reinterpret_cast<float4*>(out + off), make_float4(op(x4.x, y4.x, z4.x, s4.x), op(x4.y, y4.y, z4.y, s4.y), op(x4.z, y4.z, z4.z, s4.z), op(x4.w, y4.w, z4.w, s4.w)));
}

__global__ void __launch_bounds__(BLOCK) add_mul_relu_scalar(const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ z, const float* __restrict__ s, float* __restrict__ out, long cols) {
    long j = (long)blockIdx.x * BLOCK + threadIdx.x;
    if (j >= cols) return;
    long off = (long)blockIdx.y * cols + j;
    out[off] = op(__ldcs(x + off), __ldcs(y + off), __ldcs(z + off), __ldg(s + j));
}

int launch_add_mul_relu(const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ z, const float* __restrict__ s, float* out, long rows, long cols, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return 0;
    if (rows > 65535) return (int)cudaErrorInvalidConfiguration;  // grid.y: the host splits larger inputs
    bool vec = cols % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)y % 16 == 0 && (uintptr_t)z % 16 == 0 && (uintptr_t)s % 16 == 0 && (uintptr_t)out % 16 == 0;
    long per_block = vec ? 4L * BLOCK : (long)BLOCK;
    dim3 grid((unsigned)((cols + per_block - 1) / per_block), (unsigned)rows);
    if (vec) add_mul_relu_vec4<<<grid, BLOCK, 0, stream>>>(x, y, z, s, out, cols);
    else add_mul_relu_scalar<<<grid, BLOCK, 0, stream>>>(x, y, z, s, out, cols);
    return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

int launch_add_mul_relu(const float* __restrict__ x, const float* __restrict__ y, const float* __restrict__ z, const float* __restrict__ s, float* out, long rows, long cols, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x, torch::Tensor y, torch::Tensor z, torch::Tensor s) {
    x = x.contiguous();
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "add_mul_relu: x must be a CUDA float32 tensor");
    y = y.contiguous();
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == at::kFloat, "add_mul_relu: y must be a CUDA float32 tensor");
    z = z.contiguous();
    TORCH_CHECK(z.is_cuda() && z.scalar_type() == at::kFloat, "add_mul_relu: z must be a CUDA float32 tensor");
    s = s.contiguous();
    TORCH_CHECK(s.is_cuda() && s.scalar_type() == at::kFloat, "add_mul_relu: s must be a CUDA float32 tensor");
    TORCH_CHECK(y.sizes() == x.sizes(), "add_mul_relu: y and x shapes differ");
    TORCH_CHECK(z.sizes() == x.sizes(), "add_mul_relu: z and x shapes differ");
    TORCH_CHECK(s.numel() == x.size(-1), "add_mul_relu: s must have one value per column");
    long cols = x.size(-1);
    long rows = cols == 0 ? 0 : x.numel() / cols;
    auto out = torch::empty_like(x);
    auto stream = c10::cuda::getCurrentCUDAStream().stream();
    const long chunk = 65535;  // rows per launch (grid.y)
    for (long row0 = 0; row0 < rows; row0 += chunk) {
        long n = rows - row0 < chunk ? rows - row0 : chunk;
        long o = row0 * cols;
        int err = launch_add_mul_relu(x.data_ptr<float>() + o, y.data_ptr<float>() + o, z.data_ptr<float>() + o, s.data_ptr<float>(), out.data_ptr<float>() + o, n, cols, stream);
        TORCH_CHECK(err == 0, "add_mul_relu: kernel launch failed: ", cudaGetErrorString((cudaError_t)err));
    }
    return out;
}
"""

_ext = load_inline(name="add_mul_relu_h100", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(cols))

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return _ext.forward(x, y, z, self.scale.detach())
