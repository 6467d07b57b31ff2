# format: agentforge's lean CUDA path, `native.load_cuda`: a kernel source without torch headers,
#   compiled by nvcc to a cubin and launched with CuPy on torch's current stream
# task: level1/relu
# backend: cuda (compile-only verdict without a GPU; run and timed on one)
import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cuda

SOURCE = r"""
extern "C" __global__ void relu(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v < 0.f ? 0.f : v;
    }
}
"""
_relu = load_cuda("relu_lean_cuda", SOURCE).get_function("relu")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import cupy

        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            _relu(((n + 255) // 256,), (256,), (x.data_ptr(), y.data_ptr(), cupy.int64(n)))
        return y
