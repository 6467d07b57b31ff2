"""H100 reference kernel for level1/cumsum (inclusive scan along rows, fp32).

One block per row walks the row in tiles of BLOCK * ITEMS elements: a coalesced load of the tile
into shared memory (padded against bank conflicts), a sequential scan of ITEMS consecutive values
per thread, a shuffle scan across each warp's thread totals, a scan of the warp totals, then a
coalesced store. The running carry between tiles is kept in double, so rows of 10^6 elements do
not accumulate fp32 rounding in the carry.
Known limit: one block per row leaves SMs idle when there are fewer rows than ~2x the SM count
(the 64 x 1048576 variant); a decoupled look-back scan across blocks would fix that.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 256  # threads per row
ITEMS = 8  # consecutive elements scanned by each thread per tile
TUNABLES = {"BLOCK": [128, 256, 512], "ITEMS": [4, 8, 16]}

CUDA_SRC = f"#define BLOCK {BLOCK}\n#define ITEMS {ITEMS}\n" + r"""
#include <cuda_runtime.h>
#include <stdint.h>

#define TILE (BLOCK * ITEMS)
#define PAD(i) ((i) + ((i) >> 5))  // one padding word per 32: thread t's ITEMS words spread over banks

__global__ void __launch_bounds__(BLOCK) cumsum_rows(const float* __restrict__ x, float* __restrict__ y, long cols) {
    __shared__ float tile[PAD(TILE) + 1];
    __shared__ float warp_totals[BLOCK / 32];
    const float* xr = x + (long)blockIdx.x * cols;
    float* yr = y + (long)blockIdx.x * cols;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    double carry = 0.0;
    for (long start = 0; start < cols; start += TILE) {
        #pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            int i = k * BLOCK + threadIdx.x;  // coalesced
            tile[PAD(i)] = start + i < cols ? __ldcs(xr + start + i) : 0.0f;
        }
        __syncthreads();
        float v[ITEMS];
        float run = 0.0f;
        #pragma unroll
        for (int k = 0; k < ITEMS; ++k) { run += tile[PAD(threadIdx.x * ITEMS + k)]; v[k] = run; }
        float incl = run;  // inclusive scan of thread totals across the warp
        #pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            float up = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += up;
        }
        if (lane == 31) warp_totals[warp] = incl;
        __syncthreads();
        if (warp == 0) {
            float t = lane < BLOCK / 32 ? warp_totals[lane] : 0.0f;
            #pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                float up = __shfl_up_sync(0xffffffffu, t, o);
                if (lane >= o) t += up;
            }
            if (lane < BLOCK / 32) warp_totals[lane] = t;  // inclusive scan of warp totals
        }
        __syncthreads();
        float before = (incl - run) + (warp > 0 ? warp_totals[warp - 1] : 0.0f);  // exclusive prefix of the thread
        #pragma unroll
        for (int k = 0; k < ITEMS; ++k) tile[PAD(threadIdx.x * ITEMS + k)] = (float)(carry + (double)(before + v[k]));
        double tile_total = (double)warp_totals[BLOCK / 32 - 1];
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < ITEMS; ++k) {
            int i = k * BLOCK + threadIdx.x;
            if (start + i < cols) __stcs(yr + start + i, tile[PAD(i)]);
        }
        carry += tile_total;
        __syncthreads();  // the tile is reloaded next
    }
}

int launch_cumsum(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return 0;
    cumsum_rows<<<(unsigned)rows, BLOCK, 0, stream>>>(x, y, cols);
    return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

int launch_cumsum(const float* x, float* y, long rows, long cols, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "cumsum: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "cumsum: expected float32, got ", x.scalar_type());
    TORCH_CHECK(x.dim() >= 1, "cumsum: expected at least one dimension");
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long cols = xc.size(-1);
    long rows = cols == 0 ? 0 : xc.numel() / cols;
    int err = launch_cumsum(xc.data_ptr<float>(), y.data_ptr<float>(), rows, cols,
                            c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "cumsum: kernel launch failed: ", cudaGetErrorString((cudaError_t)err));
    return y;
}
"""

_ext = load_inline(name="cumsum_h100", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.forward(x)
