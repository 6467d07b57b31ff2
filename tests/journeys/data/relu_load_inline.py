# Written for agentforge's tests: an answer in KernelBench's format (`ModelNew`, a C++ kernel built with
# torch's `load_inline`), as an LLM prompted KernelBench-style writes one; honest: it computes the ReLU.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_cpu(torch::Tensor x) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32, "relu_cpu expects float32");
    auto input = x.contiguous();
    auto output = torch::empty_like(input);
    const float* src = input.data_ptr<float>();
    float* dst = output.data_ptr<float>();
    const int64_t size = input.numel();
    for (int64_t i = 0; i < size; ++i) {
        dst[i] = src[i] > 0.0f ? src[i] : (src[i] == src[i] ? 0.0f : src[i]);  // NaN stays NaN
    }
    return output;
}
"""

relu_module = load_inline(
    name="relu_kb_style",
    cpp_sources=relu_cpp_source,
    functions=["relu_cpu"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = relu_module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu.relu_cpu(x)
