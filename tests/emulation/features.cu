// CUDA features the emulation must execute as a GPU would; one extension, built once per session.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
namespace cg = cooperative_groups;

// 3-D indices: every thread writes its global linear id and its coordinates.
__global__ void ids3d(int* out) {
  int tpb = blockDim.x * blockDim.y * blockDim.z;
  int t = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  int b = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  int g = b * tpb + t;
  out[4 * g + 0] = g;
  out[4 * g + 1] = threadIdx.x + 10 * blockIdx.x;
  out[4 * g + 2] = threadIdx.y + 10 * blockIdx.y;
  out[4 * g + 3] = threadIdx.z + 10 * blockIdx.z;
}

// Block reduction through dynamic shared memory and a tree of __syncthreads.
__device__ float to_f(float v) { return v; }
__device__ float to_f(__half v) { return __half2float(v); }  // no implicit conversion, as under torch's flags
template <typename T>
__global__ void block_sum(const T* x, float* out, int n) {
  extern __shared__ float buf[];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  buf[threadIdx.x] = i < n ? to_f(x[i]) : 0.f;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, buf[0]);
}

// Warp collectives: shuffles (full and partial masks, widths), votes, __syncwarp, reduce.
__global__ void warp_ops(const float* x, float* out, unsigned* votes) {
  int lane = threadIdx.x & 31;
  float v = x[threadIdx.x];
  float s = v;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  float d = __shfl_down_sync(0xffffffffu, v, 3);
  float u = __shfl_up_sync(0xffffffffu, v, 2, 8);
  float b = __shfl_sync(0xffffffffu, v, 5);
  float half_sum = 0.f;
  if (lane < 16) {  // a partial mask: only the lower half of the warp takes part
    half_sum = v;
    for (int o = 8; o > 0; o >>= 1) half_sum += __shfl_xor_sync(0x0000ffffu, half_sum, o);
  }
  __syncwarp();
  unsigned ballot = __ballot_sync(0xffffffffu, v > 0.f);
  int any = __any_sync(0xffffffffu, v > 3.f);
  int all = __all_sync(0xffffffffu, v > -100.f);
  unsigned red = __reduce_add_sync(0xffffffffu, (unsigned)lane);
  out[threadIdx.x * 5 + 0] = s;
  out[threadIdx.x * 5 + 1] = d;
  out[threadIdx.x * 5 + 2] = u;
  out[threadIdx.x * 5 + 3] = b;
  out[threadIdx.x * 5 + 4] = half_sum;
  if (lane == 0) { votes[(threadIdx.x >> 5) * 4 + 0] = ballot; votes[(threadIdx.x >> 5) * 4 + 1] = any;
                   votes[(threadIdx.x >> 5) * 4 + 2] = all; votes[(threadIdx.x >> 5) * 4 + 3] = red; }
}

// __syncthreads_count / _and / _or, static shared memory.
__global__ void barrier_forms(const float* x, int* out) {
  __shared__ int seen[3];
  float v = x[threadIdx.x];
  int c = __syncthreads_count(v > 0.f);
  int a = __syncthreads_and(v > -100.f);
  int o = __syncthreads_or(v > 1000.f);
  if (threadIdx.x == 0) { seen[0] = c; seen[1] = a; seen[2] = o; }
  __syncthreads();
  if (threadIdx.x < 3) out[threadIdx.x] = seen[threadIdx.x];
}

// Atomics on int, float, double, half and bf16; CAS and Exch; max and min.
__global__ void atomics(int* i, float* f, double* d, __half* h, __nv_bfloat16* b, unsigned* m) {
  atomicAdd(i, 1);
  atomicMax(i + 1, (int)threadIdx.x);
  atomicMin(i + 2, -(int)threadIdx.x);
  atomicAdd(f, 0.5f);
  atomicAdd(d, 0.25);
  atomicAdd(h, __float2half(1.0f));
  atomicAdd(b, __float2bfloat16(1.0f));
  atomicExch(m, 7u);
  unsigned old;
  do { old = m[1]; } while (atomicCAS(m + 1, old, old + 2u) != old);
}

// Half and bf16 through their intrinsics (no operators), vector types and __ldg.
__global__ void halves(const __half* x, const __nv_bfloat16* y, const float4* z, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half2 h2 = __halves2half2(x[i], x[i]);
  float2 hf = __half22float2(__hmul2(h2, h2));
  __nv_bfloat162 b2 = __floats2bfloat162_rn(__bfloat162float(y[i]), 2.0f);
  float2 bf = __bfloat1622float2(b2);
  float4 v = __ldg(z + i);
  out[i] = hf.x + bf.x * bf.y + (v.x + v.y + v.z + v.w) + __expf(0.f) + rsqrtf(4.0f) + __fdividef(1.f, 4.f)
           + fmaf(2.f, 3.f, 1.f);
}

// cooperative_groups: block sync, warp tiles, cg::reduce.
__global__ void groups(const float* x, float* out) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  cg::thread_block_tile<8> eight = cg::tiled_partition<8>(block);
  float v = x[block.thread_rank()];
  float w = cg::reduce(warp, v, cg::plus<float>());
  float e = cg::reduce(eight, v, cg::plus<float>());
  block.sync();
  out[block.thread_rank() * 2] = w;
  out[block.thread_rank() * 2 + 1] = e + eight.meta_group_rank() * 0;
}

// A barrier that half the block never reaches: a GPU hangs.
__global__ void half_barrier(float* x) {
  if (threadIdx.x < 16) { __syncthreads(); }
  else { x[threadIdx.x] = 1.f; __syncthreads(); }
}
// A full-mask shuffle in a warp whose upper lanes have left.
__global__ void shuffle_after_exit(float* x) {
  if (threadIdx.x >= 16) return;
  x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}
__global__ void __launch_bounds__(128) bounded(float* x) { x[threadIdx.x] = 1.f; }
