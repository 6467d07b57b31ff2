// cooperative_groups basics over the emulation's barriers: this_thread_block, tiled_partition
// (static and dynamic tiles of up to one warp), their sync, shuffles, votes and cg::reduce.
#pragma once
#include "agentforge_emu/runtime.h"

namespace cooperative_groups {
struct thread_block {
  void sync() const { ::emu::block_barrier(-1, 0, 0); }
  unsigned thread_rank() const { auto t = threadIdx; return (t.z * blockDim.y + t.y) * blockDim.x + t.x; }
  unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
  unsigned num_threads() const { return size(); }
  dim3 group_index() const { return dim3(blockIdx); }
  dim3 thread_index() const { return dim3(threadIdx); }
  dim3 dim_threads() const { return blockDim; }
  dim3 group_dim() const { return blockDim; }
};
inline thread_block this_thread_block() { return thread_block{}; }
struct grid_group {
  void sync() const { ::emu::needs_gpu("cooperative_groups::grid_group::sync (grid-wide synchronisation)"); }
  unsigned long long thread_rank() const {
    unsigned long long b = (blockIdx.z * gridDim.y + blockIdx.y) * (unsigned long long)gridDim.x + blockIdx.x;
    return b * (blockDim.x * blockDim.y * blockDim.z) + thread_block{}.thread_rank();
  }
  unsigned long long size() const { return (unsigned long long)gridDim.x * gridDim.y * gridDim.z * blockDim.x * blockDim.y * blockDim.z; }
};
inline grid_group this_grid() { return grid_group{}; }

struct thread_group_tile {
  unsigned tile;  // threads per tile, a power of two up to 32
  unsigned rank_in_block() const { return thread_block{}.thread_rank(); }
  unsigned mask() const {
    unsigned lane = rank_in_block() & 31u, base = lane & ~(tile - 1u);
    return (tile >= 32 ? 0xffffffffu : ((1u << tile) - 1u)) << base;
  }
  unsigned thread_rank() const { return rank_in_block() & (tile - 1u); }
  unsigned size() const { return tile; }
  unsigned num_threads() const { return tile; }
  unsigned meta_group_rank() const { return rank_in_block() / tile; }
  unsigned meta_group_size() const { return (thread_block{}.size() + tile - 1) / tile; }
  void sync() const { __syncwarp(mask()); }
  template <class T> T shfl(T v, int src) const { return __shfl_sync(mask(), v, src, (int)tile); }
  template <class T> T shfl_down(T v, unsigned d) const { return __shfl_down_sync(mask(), v, d, (int)tile); }
  template <class T> T shfl_up(T v, unsigned d) const { return __shfl_up_sync(mask(), v, d, (int)tile); }
  template <class T> T shfl_xor(T v, int x) const { return __shfl_xor_sync(mask(), v, x, (int)tile); }
  int any(int p) const { return __any_sync(mask(), p); }
  int all(int p) const { return __all_sync(mask(), p); }
  unsigned ballot(int p) const { return __ballot_sync(mask(), p) >> ((rank_in_block() & 31u) & ~(tile - 1u)); }
};
template <unsigned N> struct thread_block_tile : thread_group_tile {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tiles of a power of two up to 32 threads");
  thread_block_tile() : thread_group_tile{N} {}
};
template <unsigned N, class P> inline thread_block_tile<N> tiled_partition(const P&) { return thread_block_tile<N>{}; }
inline thread_group_tile tiled_partition(const thread_block&, unsigned n) {
  if (n == 0 || n > 32 || (n & (n - 1))) ::emu::needs_gpu("tiled_partition with tiles larger than a warp");
  return thread_group_tile{n};
}
template <class G> inline void sync(const G& g) { g.sync(); }

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };
template <class Tile, class T, class Op> inline T reduce(const Tile& g, T v, Op op) {
  for (unsigned o = 1; o < g.size(); o <<= 1) v = op(v, g.shfl_xor(v, (int)o));
  return v;
}
template <class Tile, class T, class Op> inline T inclusive_scan(const Tile& g, T v, Op op) {
  for (unsigned o = 1; o < g.size(); o <<= 1) { T u = g.shfl_up(v, o); if (g.thread_rank() >= o) v = op(v, u); }
  return v;
}
}  // namespace cooperative_groups
