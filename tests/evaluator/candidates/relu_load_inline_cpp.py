# format: KernelBench answer, `load_inline` with C++ sources (torch/extension.h, pybind module
#   generated from `functions`), as an LLM prompted KernelBench-style writes it
# task: level1/relu (any shape: fp32, contiguous or not)
# backend: cpu (built and timed here); the same shape with cuda_sources is the CUDA form
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_forward(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_forward: fp32 only");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    const float* in = xc.data_ptr<float>();
    float* o = out.data_ptr<float>();
    const int64_t n = xc.numel();
    for (int64_t i = 0; i < n; ++i) {
        const float v = in[i];
        o[i] = v < 0.f ? 0.f : v;  // NaN stays NaN, as in torch.relu
    }
    return out;
}
"""

relu_ext = load_inline(name="relu_ext", cpp_sources=cpp_source, functions=["relu_forward"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_forward(x)
