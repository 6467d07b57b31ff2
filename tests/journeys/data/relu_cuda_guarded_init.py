# Written for agentforge's tests: a KernelBench-format CUDA answer (`ModelNew`) whose `load_inline` sits in
# `__init__` behind `if torch.cuda.is_available():`, with a PyTorch fallback, as many published RL-generated
# answers are written. Honest: its kernel computes the ReLU. Without a GPU the CPU emulation must reach it.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v < 0.f ? 0.f : v;  // NaN stays NaN
    }
}

void relu_launch(const float* x, float* y, long n, cudaStream_t stream) {
    if (n > 0) relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
"""

cpp_source = r"""
#include <c10/cuda/CUDAStream.h>

void relu_launch(const float* x, float* y, long n, cudaStream_t stream);

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "relu_forward: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "relu_forward: float32 only");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    relu_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(), c10::cuda::getCurrentCUDAStream().stream());
    return y;
}
"""


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ext = None
        if torch.cuda.is_available():
            try:
                self.ext = load_inline(name="relu_guarded", cpp_sources=cpp_source, cuda_sources=cuda_source,
                                       functions=["relu_forward"], verbose=False)
            except Exception:
                self.ext = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ext is None or not x.is_cuda:
            return torch.relu(x)
        return self.ext.relu_forward(x)
