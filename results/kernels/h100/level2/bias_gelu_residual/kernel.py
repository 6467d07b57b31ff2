"""H100 reference kernel for level2/bias_gelu_residual (fp32): residual + alpha[col] * gelu(x + bias[col]), exact (erf) GELU.

One fused pass: every input element is read once and the output written once (eager PyTorch
runs five kernels with intermediates in memory). Grid: (column chunks, rows), so the
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

__device__ __forceinline__ float op(float x, float r, float b, float a) {
    float v = x + b;
    return r + a * (0.5f * v * erfcf(-v * 0.70710678118654752f));  // gelu(v) = v * Phi(v)
}

__global__ void __launch_bounds__(BLOCK) bias_gelu_residual_vec4(const float* __restrict__ x, const float* __restrict__ r, const float* __restrict__ b, const float* __restrict__ a, float* __restrict__ out, long cols) {
    long j = ((long)blockIdx.x * BLOCK + threadIdx.x) * 4;
    if (j >= cols) return;
    long off = (long)blockIdx.y * cols + j;
    float4 x4 = __ldcs(reinterpret_cast<const float4*>(x + off));
    float4 r4 = __ldcs(reinterpret_cast<const float4*>(r + off));
    float4 b4 = __ldg(reinterpret_cast<const float4*>(b + j));
    float4 a4 = __ldg(reinterpret_cast<const float4*>(a + j));
    __stcs(reinterpret_cast<float4*>(out + off), make_float4(op(x4.x, r4.x, b4.x, a4.x), op(x4.y, r4.y, b4.y, a4.y), op(x4.z, r4.z, b4.z, a4.z), op(x4.w, r4.w, b4.w, a4.w)));
}

__global__ void __launch_bounds__(BLOCK) bias_gelu_residual_scalar(const float* __restrict__ x, const float* __restrict__ r, const float* __restrict__ b, const float* __restrict__ a, float* __restrict__ out, long cols) {
    long j = (long)blockIdx.x * BLOCK + threadIdx.x;
    if (j >= cols) return;
    long off = (long)blockIdx.y * cols + j;
    out[off] = op(__ldcs(x + off), __ldcs(r + off), __ldg(b + j), __ldg(a + j));
}

int launch_bias_gelu_residual(const float* __restrict__ x, const float* __restrict__ r, const float* __restrict__ b, const float* __restrict__ a, float* out, long rows, long cols, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return 0;
    if (rows > 65535) return (int)cudaErrorInvalidConfiguration;  // grid.y: the host splits larger inputs
    bool vec = cols % 4 == 0 && (uintptr_t)x % 16 == 0 && (uintptr_t)r % 16 == 0 && (uintptr_t)b % 16 == 0 && (uintptr_t)a % 16 == 0 && (uintptr_t)out % 16 == 0;
    long per_block = vec ? 4L * BLOCK : (long)BLOCK;
    dim3 grid((unsigned)((cols + per_block - 1) / per_block), (unsigned)rows);
    if (vec) bias_gelu_residual_vec4<<<grid, BLOCK, 0, stream>>>(x, r, b, a, out, cols);
    else bias_gelu_residual_scalar<<<grid, BLOCK, 0, stream>>>(x, r, b, a, out, cols);
    return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

int launch_bias_gelu_residual(const float* __restrict__ x, const float* __restrict__ r, const float* __restrict__ b, const float* __restrict__ a, float* out, long rows, long cols, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x, torch::Tensor r, torch::Tensor b, torch::Tensor a) {
    x = x.contiguous();
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == at::kFloat, "bias_gelu_residual: x must be a CUDA float32 tensor");
    r = r.contiguous();
    TORCH_CHECK(r.is_cuda() && r.scalar_type() == at::kFloat, "bias_gelu_residual: r must be a CUDA float32 tensor");
    b = b.contiguous();
    TORCH_CHECK(b.is_cuda() && b.scalar_type() == at::kFloat, "bias_gelu_residual: b must be a CUDA float32 tensor");
    a = a.contiguous();
    TORCH_CHECK(a.is_cuda() && a.scalar_type() == at::kFloat, "bias_gelu_residual: a must be a CUDA float32 tensor");
    TORCH_CHECK(r.sizes() == x.sizes(), "bias_gelu_residual: r and x shapes differ");
    TORCH_CHECK(b.numel() == x.size(-1), "bias_gelu_residual: b must have one value per column");
    TORCH_CHECK(a.numel() == x.size(-1), "bias_gelu_residual: a must have one value per column");
    long cols = x.size(-1);
    long rows = cols == 0 ? 0 : x.numel() / cols;
    auto out = torch::empty_like(x);
    auto stream = c10::cuda::getCurrentCUDAStream().stream();
    const long chunk = 65535;  // rows per launch (grid.y)
    for (long row0 = 0; row0 < rows; row0 += chunk) {
        long n = rows - row0 < chunk ? rows - row0 : chunk;
        long o = row0 * cols;
        int err = launch_bias_gelu_residual(x.data_ptr<float>() + o, r.data_ptr<float>() + o, b.data_ptr<float>(), a.data_ptr<float>(), out.data_ptr<float>() + o, n, cols, stream);
        TORCH_CHECK(err == 0, "bias_gelu_residual: kernel launch failed: ", cudaGetErrorString((cudaError_t)err));
    }
    return out;
}
"""

_ext = load_inline(name="bias_gelu_residual_h100", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.alpha = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return _ext.forward(x, residual, self.bias.detach(), self.alpha.detach())
