# format: KernelBench load_inline with CUDA sources, built in __init__ behind torch.cuda.is_available(),
#   with a try/except fallback to PyTorch (the shape of many published RL-generated answers)
# task: level1/relu
# backend: cuda (compile-only verdict without a GPU: the build is reached under the CUDA lookalike)
# A test of the build verdict: its CUDA source needs no torch header (no_implicit_headers), so the
#   build takes seconds; the glue torch would generate is left out, so on a GPU the launch would need
#   bindings of its own (tests/evaluator/test_cuda_lookalike.py builds a complete answer, slowly).
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
extern "C" void relu_launch(long x, long y, long n) {
    relu_kernel<<<(unsigned)((n + 255) / 256), 256>>>((const float*)x, (float*)y, n);
}
"""


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ext = None
        if torch.cuda.is_available():
            try:
                self.ext = load_inline("relu_in_init", cpp_sources="", cuda_sources=CUDA_SOURCE,
                                       no_implicit_headers=True, extra_cuda_cflags=["-O3"])
            except Exception:
                self.ext = None  # falls back to PyTorch: the build's failure must still be the verdict

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.ext is None or not x.is_cuda:
            return torch.relu(x)
        y = torch.empty_like(x)
        self.ext.relu_launch(x.data_ptr(), y.data_ptr(), x.numel())
        return y
