"""Compile time of KernelBench's `load_inline` path against the lean paths, on the same kernels.

Each kernel is built cold (a fresh, empty build cache) through:
* CPU: `load_inline(cpp_sources=...)` (torch/extension.h + pybind11) vs `load_cpp` (g++, extern "C");
* CUDA: nvcc -cubin of the kernel with torch's headers (the device pass of `load_inline(cuda_sources=...)`,
  which then also compiles and links the host side with g++)
  vs the lean nvcc -cubin without them (`load_cuda`). The CUDA side is compile-only, so it runs
  on a machine without a GPU.

    python benchmarks/compile_speed.py [--out results/evaluator/compile_speed-<host>.json] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ELEMENTWISE = [("relu", "x > 0.f ? x : 0.f"), ("silu", "x / (1.f + expf(-x))"), ("square", "x * x")]

CPU_LEAN = r'''
#include <cstdint>
#include <cmath>
extern "C" void {name}(const float* in, float* out, int64_t n) {{
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {{ float x = in[i]; out[i] = {expr}; }}
}}
'''
CPU_INLINE = r'''
#include <torch/extension.h>
#include <cmath>
torch::Tensor {name}(torch::Tensor input) {{
    auto output = torch::empty_like(input);
    const float* in = input.data_ptr<float>(); float* out = output.data_ptr<float>();
    int64_t n = input.numel();
    #pragma omp parallel for
    for (int64_t i = 0; i < n; ++i) {{ float x = in[i]; out[i] = {expr}; }}
    return output;
}}
'''
CUDA_KERNEL = r'''
extern "C" __global__ void {name}_kernel(const float* __restrict__ in, float* __restrict__ out, long long n) {{
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{ float x = in[i]; out[i] = {expr}; }}
}}
'''
CUDA_INLINE_PREFIX = "#include <torch/extension.h>\n#include <cuda_runtime.h>\n"
CUDA_INLINE_HOST = r'''
torch::Tensor {name}(torch::Tensor input) {{
    auto output = torch::empty_like(input);
    long long n = input.numel();
    {name}_kernel<<<(n + 255) / 256, 256>>>(input.data_ptr<float>(), output.data_ptr<float>(), n);
    return output;
}}
'''


def measure(repeats: int) -> dict:
    from agentforge.evaluator import build_cache, native
    from agentforge.evaluator.worker.compile_only import compile_cuda_source

    rows = []
    for rep in range(repeats):
        for name, expr in ELEMENTWISE:
            with tempfile.TemporaryDirectory() as cold:
                build_cache.set_cache_root(cold)  # every build below is a cold one
                tag = f"{name}_{rep}"
                # a comment with the repeat number keeps sources distinct across repeats
                salt = f"// repeat {rep}\n"
                row = {"kernel": name, "repeat": rep}
                inline_cpp = salt + CPU_INLINE.format(name=name, expr=expr)
                lean_cpp = salt + CPU_LEAN.format(name=name, expr=expr)
                kernel = CUDA_KERNEL.format(name=name, expr=expr)
                with_headers = salt + CUDA_INLINE_PREFIX + kernel + CUDA_INLINE_HOST.format(name=name)
                start = time.perf_counter()
                native.cached_load_inline(tag, cpp_sources=inline_cpp, functions=[name],
                                          extra_cflags=["-O3", "-fopenmp"], extra_ldflags=["-fopenmp"])
                row["cpu_load_inline_s"] = time.perf_counter() - start
                start = time.perf_counter()
                native.load_cpp(tag, lean_cpp)
                row["cpu_lean_s"] = time.perf_counter() - start
                start = time.perf_counter()
                compile_cuda_source(with_headers, tag, "sm_90a", [])
                row["cuda_torch_headers_s"] = time.perf_counter() - start
                start = time.perf_counter()
                compile_cuda_source(salt + kernel, tag, "sm_90a", [], torch_headers=False)
                row["cuda_lean_s"] = time.perf_counter() - start
                rows.append(row)
                print(json.dumps(row), flush=True)
    paths = ["cpu_load_inline_s", "cpu_lean_s", "cuda_torch_headers_s", "cuda_lean_s"]
    summary = {p: {"median_s": statistics.median(r[p] for r in rows), "max_s": max(r[p] for r in rows)}
               for p in paths}
    summary["cpu_ratio"] = summary["cpu_load_inline_s"]["median_s"] / summary["cpu_lean_s"]["median_s"]
    summary["cuda_ratio"] = summary["cuda_torch_headers_s"]["median_s"] / summary["cuda_lean_s"]["median_s"]
    return {"rows": rows, "summary": summary}


def main() -> None:
    import os

    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    result = measure(args.repeats)
    result["machine"] = {"host": socket.gethostname(), "cpu": platform.processor() or platform.machine(),
                         "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
                         "date": datetime.now(UTC).isoformat(timespec="seconds")}
    out = args.out or Path("results/evaluator") / f"compile_speed-{socket.gethostname()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
