// agentforge CUDA-on-CPU emulation runtime: CUDA C++ executed by the host compiler.
//
// Each CUDA thread of a block is a ucontext fiber with its own small stack; the blocks of a grid
// run one after another on the calling OS thread. A fiber runs until it reaches a synchronising
// point (__syncthreads and its forms, a warp collective, __syncwarp, a cooperative-groups sync),
// where it yields to the block's scheduler. The scheduler's order of the ready fibers changes per
// launch (forward, reverse, seeded random), so a missing barrier shows as a schedule-dependent
// result. A block in which no fiber can go on while some have not finished is a deadlock and an
// error of the launch, as is a __syncthreads reached at different places by the threads of one
// block (divergent barrier). Grid and block limits and __launch_bounds__ are checked as a GPU
// checks them; a failed launch runs nothing and reports its error through cudaGetLastError.
// Faults found while running (a deadlock, a divergent barrier, an out-of-bounds access reported by
// the bounds checks) throw from the launch: torch would raise at the next synchronisation.
#pragma once

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <ucontext.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "agentforge_emu/guarded_memory.h"

#ifndef AGENTFORGE_EMU_STACK_BYTES
#define AGENTFORGE_EMU_STACK_BYTES (64 * 1024)
#endif

// ----- qualifiers -----------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __constant__ static
#define __managed__
#define __align__(n) alignas(n)
#define __launch_bounds__(...)
#define __grid_constant__
#define __CUDA_NO_HALF_OPERATORS__ 1
#define __CUDA_NO_HALF_CONVERSIONS__ 1
#define __CUDA_NO_BFLOAT16_CONVERSIONS__ 1
#define __CUDA_NO_HALF2_OPERATORS__ 1
#define AGENTFORGE_CUDA_EMULATION 1

// ----- dim3 and the vector types ----------------------------------------------------------------
struct uint3 { unsigned int x, y, z; };
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

#define AFEMU_VEC2(T, N, A) struct alignas(A) N##2 { T x, y; }; \
  inline N##2 make_##N##2(T a, T b) { return N##2{a, b}; }
#define AFEMU_VEC3(T, N) struct N##3 { T x, y, z; }; \
  inline N##3 make_##N##3(T a, T b, T c) { return N##3{a, b, c}; }
#define AFEMU_VEC4(T, N, A) struct alignas(A) N##4 { T x, y, z, w; }; \
  inline N##4 make_##N##4(T a, T b, T c, T d) { return N##4{a, b, c, d}; }
AFEMU_VEC2(float, float, 8) AFEMU_VEC3(float, float) AFEMU_VEC4(float, float, 16)
AFEMU_VEC2(double, double, 16) AFEMU_VEC3(double, double) AFEMU_VEC4(double, double, 16)
AFEMU_VEC2(int, int, 8) AFEMU_VEC3(int, int) AFEMU_VEC4(int, int, 16)
AFEMU_VEC2(unsigned int, uint, 8) AFEMU_VEC4(unsigned int, uint, 16)
AFEMU_VEC2(short, short, 4) AFEMU_VEC4(short, short, 8)
AFEMU_VEC2(unsigned short, ushort, 4) AFEMU_VEC4(unsigned short, ushort, 8)
AFEMU_VEC2(signed char, char, 2) AFEMU_VEC4(signed char, char, 4)
AFEMU_VEC2(unsigned char, uchar, 2) AFEMU_VEC4(unsigned char, uchar, 4)
AFEMU_VEC2(long, long, 16) AFEMU_VEC4(long, long, 16)
AFEMU_VEC2(long long, longlong, 16) AFEMU_VEC4(long long, longlong, 16)
AFEMU_VEC2(unsigned long long, ulonglong, 16)
inline uint3 make_uint3(unsigned a, unsigned b, unsigned c) { return uint3{a, b, c}; }
#undef AFEMU_VEC2
#undef AFEMU_VEC3
#undef AFEMU_VEC4

// ----- errors, as the CUDA runtime names them ---------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDeviceFunction = 98, cudaErrorNoDevice = 100, cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701, cudaErrorLaunchFailure = 719, cudaErrorNotSupported = 801,
  cudaErrorUnknown = 999
};
typedef cudaError_t cudaError;
typedef cudaError_t CUresult;
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
struct CUevent_st;
typedef CUevent_st* cudaEvent_t;

namespace emu {

struct Error : std::runtime_error {
  cudaError_t code;
  Error(cudaError_t c, const std::string& m) : std::runtime_error(m), code(c) {}
};

// ----- the execution state (inline variables: one per extension library) -------------------------
enum class St : unsigned char { Ready, WaitBlock, WaitWarp, Done };
enum class Op : unsigned char { None, Sync, Idx, Up, Down, Xor, Ballot, Any, All, Match, RedAdd, RedMin, RedMax,
                                RedAnd, RedOr, RedXor };

struct Fiber {
  ucontext_t ctx;           // the first entry (makecontext/swapcontext)
  jmp_buf jb;               // every later switch (_setjmp/_longjmp: no signal-mask system call)
  bool started = false;
  uint3 tid;
  int lane = 0, warp = 0;
  St state = St::Ready;
  int site = 0;             // where a block barrier was reached (its line)
  Op op = Op::None;         // the warp collective waited on
  unsigned mask = 0;
  int param = 0, width = 32;
  unsigned char in[16] = {}, out[16] = {};
  int pred = 0;
};

struct WarpGroup { unsigned mask; Op op; unsigned arrived; };

struct Block {
  std::vector<Fiber> fibers;
  std::vector<std::vector<WarpGroup>> warps;
  int n = 0, done = 0, waiting = 0, site = 0;
  long long bar_count = 0;
  int bar_result = 0;
  int bar_kind = 0;  // 0 plain, 1 count, 2 and, 3 or
  ucontext_t sched;
  jmp_buf sched_jb;
  std::string fault;
  cudaError_t fault_code = cudaSuccess;
};

inline Block* g_block = nullptr;
inline Fiber* g_cur = nullptr;
inline uint3 g_block_idx{0, 0, 0};
inline dim3 g_block_dim{1, 1, 1};
inline dim3 g_grid_dim{1, 1, 1};
inline unsigned char* g_dyn_smem = nullptr;
inline size_t g_dyn_smem_bytes = 0;
inline cudaError_t g_last_error = cudaSuccess;
inline cudaError_t g_sticky_error = cudaSuccess;
inline size_t g_smem_optin = 48 * 1024;     // raised by cudaFuncSetAttribute (any kernel of the module)
inline unsigned long long g_launches = 0;   // picks each launch's schedule
inline unsigned long long g_seed = 0x9e3779b97f4a7c15ull;
inline std::recursive_mutex g_mutex;
inline unsigned long long g_clock = 0;
inline char g_signal_fault[400];           // what the fault handler found (a guard page hit), else empty

inline const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

// A fault inside a running kernel: the launch ends, its fibers are dropped, the launch throws.
[[noreturn]] inline void fault(cudaError_t code, const std::string& what) {
  Block* b = g_block;
  if (b == nullptr || g_cur == nullptr) throw Error(code, what);
  if (b->fault.empty()) { b->fault = what; b->fault_code = code; }
  g_cur->state = St::Done;
  _longjmp(b->sched_jb, 1);  // never resumed
}

inline const uint3& tid() { return g_cur->tid; }

inline void yield_now() {
  if (_setjmp(g_cur->jb) == 0) _longjmp(g_block->sched_jb, 1);
}

inline std::string where(const Fiber& f) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "block (%u,%u,%u) thread (%u,%u,%u)", g_block_idx.x, g_block_idx.y, g_block_idx.z,
                f.tid.x, f.tid.y, f.tid.z);
  return buf;
}

// ----- block barriers -----------------------------------------------------------------------------
inline void release_block(Block* b) {
  for (auto& f : b->fibers)
    if (f.state == St::WaitBlock) { f.state = St::Ready; f.pred = b->bar_result; }
  b->waiting = 0;
}

[[noreturn]] inline void plain_sync() {
  fault(cudaErrorUnknown, "internal error of the CPU emulation: a synchronising call in a launch it ran without "
        "fibers (its sources were judged barrier-free)");
}
inline bool g_plain_launch = false;

inline int block_barrier(int line, int kind, int pred) {
  if (g_plain_launch) plain_sync();
  Block* b = g_block;
  Fiber* f = g_cur;
  if (b->waiting == 0) { b->site = line; b->bar_kind = kind; b->bar_count = 0; }
  else if (line != b->site || kind != b->bar_kind) {
    fault(cudaErrorLaunchFailure, "divergent __syncthreads: " + where(*f) + " waits at line " + std::to_string(line)
          + " while other threads of its block wait at line " + std::to_string(b->site)
          + " (on a GPU: a hang or undefined behaviour)");
  }
  b->bar_count += pred != 0;
  b->waiting++;
  f->state = St::WaitBlock;
  if (b->waiting + b->done == b->n) {
    int arrived = b->waiting;
    b->bar_result = kind == 1 ? (int)b->bar_count : kind == 2 ? (b->bar_count == arrived) : kind == 3 ? (b->bar_count > 0) : 0;
    release_block(b);
  }
  yield_now();
  return f->pred;
}

// ----- warp collectives ----------------------------------------------------------------------------
inline unsigned lanes_present(Block* b, int warp) {
  int first = warp * 32, count = std::min(32, b->n - first);
  return count >= 32 ? 0xffffffffu : ((1u << count) - 1u);
}

inline void complete_group(Block* b, int warp, WarpGroup& g) {
  Fiber* lanes[32] = {};
  for (int l = 0; l < 32; ++l)
    if (g.arrived & (1u << l)) lanes[l] = &b->fibers[warp * 32 + l];
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l) if (lanes[l] && lanes[l]->pred) ballot |= 1u << l;
  for (int l = 0; l < 32; ++l) {
    Fiber* f = lanes[l];
    if (!f) continue;
    int w = f->width, base = l & ~(w - 1), src = l;
    switch (g.op) {
      case Op::Idx: src = base + (((f->param % w) + w) % w); break;
      case Op::Up: src = (l - base) >= f->param ? l - f->param : l; break;
      case Op::Down: src = (l - base) + f->param < w ? l + f->param : l; break;
      case Op::Xor: src = l ^ f->param; if (src < base || src >= base + w) src = l; break;
      default: break;
    }
    switch (g.op) {
      case Op::Idx: case Op::Up: case Op::Down: case Op::Xor: {
        Fiber* s = (src >= 0 && src < 32 && lanes[src]) ? lanes[src] : f;
        std::memcpy(f->out, s->in, 16);
        break;
      }
      case Op::Ballot: std::memcpy(f->out, &ballot, 4); break;
      case Op::Any: { int r = ballot != 0; std::memcpy(f->out, &r, 4); break; }
      case Op::All: { int r = ballot == g.arrived; std::memcpy(f->out, &r, 4); break; }
      case Op::Match: {
        unsigned m = 0;
        for (int k = 0; k < 32; ++k) if (lanes[k] && std::memcmp(lanes[k]->in, f->in, 8) == 0) m |= 1u << k;
        std::memcpy(f->out, &m, 4);
        break;
      }
      case Op::RedAdd: case Op::RedMin: case Op::RedMax: case Op::RedAnd: case Op::RedOr: case Op::RedXor: {
        unsigned acc = 0; bool first = true; bool is_signed = f->param != 0;
        for (int k = 0; k < 32; ++k) {
          if (!lanes[k]) continue;
          unsigned v; std::memcpy(&v, lanes[k]->in, 4);
          if (first) { acc = v; first = false; continue; }
          switch (g.op) {
            case Op::RedAdd: acc += v; break;
            case Op::RedMin: acc = is_signed ? (unsigned)std::min((int)acc, (int)v) : std::min(acc, v); break;
            case Op::RedMax: acc = is_signed ? (unsigned)std::max((int)acc, (int)v) : std::max(acc, v); break;
            case Op::RedAnd: acc &= v; break;
            case Op::RedOr: acc |= v; break;
            default: acc ^= v; break;
          }
        }
        std::memcpy(f->out, &acc, 4);
        break;
      }
      default: break;
    }
    f->state = St::Ready;
  }
}

inline const char* op_name(Op op) {
  switch (op) {
    case Op::Sync: return "__syncwarp";
    case Op::Idx: return "__shfl_sync";
    case Op::Up: return "__shfl_up_sync";
    case Op::Down: return "__shfl_down_sync";
    case Op::Xor: return "__shfl_xor_sync";
    case Op::Ballot: return "__ballot_sync";
    case Op::Any: return "__any_sync";
    case Op::All: return "__all_sync";
    case Op::Match: return "__match_any_sync";
    default: return "__reduce_*_sync";
  }
}

inline void warp_collective(Op op, unsigned mask, int param, int width, const void* in, size_t size, int pred) {
  if (g_plain_launch) plain_sync();
  Block* b = g_block;
  Fiber* f = g_cur;
  if (!(mask & (1u << f->lane)))
    fault(cudaErrorLaunchFailure, std::string(op_name(op)) + ": " + where(*f) + " (lane " + std::to_string(f->lane)
          + ") is not in its own mask");
  if (width <= 0 || width > 32 || (width & (width - 1)))
    fault(cudaErrorLaunchFailure, std::string(op_name(op)) + ": width must be a power of two up to 32");
  mask &= lanes_present(b, f->warp);  // lanes past the block's end do not exist
  f->op = op; f->mask = mask; f->param = param; f->width = width; f->pred = pred;
  std::memset(f->in, 0, 16);
  if (size) std::memcpy(f->in, in, std::min<size_t>(size, 16));
  auto& groups = b->warps[f->warp];
  WarpGroup* g = nullptr;
  for (auto& x : groups)  // groups with overlapping masks wait side by side (lanes in __syncwarp while
    if (x.mask == mask) { g = &x; break; }  // a subset shuffles among itself)
  if (g == nullptr) { groups.push_back(WarpGroup{mask, op, 0}); g = &groups.back(); }
  else if (g->op != op && !(g->op == Op::Sync || op == Op::Sync) && !(
      (g->op == Op::Idx || g->op == Op::Up || g->op == Op::Down || g->op == Op::Xor) &&
      (op == Op::Idx || op == Op::Up || op == Op::Down || op == Op::Xor)))
    fault(cudaErrorLaunchFailure, std::string("warp divergence: lanes of one warp meet in ") + op_name(g->op) + " and "
          + op_name(op) + " with the same mask");
  g->arrived |= 1u << f->lane;
  f->state = St::WaitWarp;
  if (g->arrived == mask) {
    if (g->op != op && (g->op == Op::Sync || op == Op::Sync)) g->op = Op::Sync;
    WarpGroup done = *g;
    groups.erase(groups.begin() + (g - groups.data()));
    complete_group(b, f->warp, done);
  }
  yield_now();
}

template <class T> T shfl(Op op, unsigned mask, T v, int param, int width) {
  static_assert(sizeof(T) <= 16 && std::is_trivially_copyable<T>::value, "shuffle of an unsupported type");
  warp_collective(op, mask, param, width, &v, sizeof(T), 0);
  T r; std::memcpy(&r, g_cur->out, sizeof(T));
  return r;
}
inline unsigned vote(Op op, unsigned mask, int pred) {
  warp_collective(op, mask, 0, 32, nullptr, 0, pred);
  unsigned r; std::memcpy(&r, g_cur->out, 4);
  return r;
}

// ----- fibers and their stacks ----------------------------------------------------------------------
struct Stacks {
  std::vector<unsigned char*> bases;
  size_t bytes = 0;
  unsigned char* get(int i) {
    while ((int)bases.size() <= i) {
      size_t page = (size_t)sysconf(_SC_PAGESIZE);
      bytes = (AGENTFORGE_EMU_STACK_BYTES + page - 1) / page * page;
      void* p = mmap(nullptr, bytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) throw Error(cudaErrorMemoryAllocation, "no memory for a thread's stack");
      mprotect(p, page, PROT_NONE);  // a stack overflow faults instead of corrupting a neighbour
      bases.push_back(static_cast<unsigned char*>(p) + page);
    }
    return bases[i];
  }
};
inline Stacks g_stacks;

inline void (*g_entry_body)(void*) = nullptr;
inline void* g_entry_arg = nullptr;

inline void finish_thread() {
  Block* b = g_block;
  g_cur->state = St::Done;
  b->done++;
  if (b->waiting > 0 && b->waiting + b->done == b->n) {  // the last threads still out exited
    int arrived = b->waiting;
    b->bar_result = b->bar_kind == 1 ? (int)b->bar_count : b->bar_kind == 2 ? (b->bar_count == arrived)
                  : b->bar_kind == 3 ? (b->bar_count > 0) : 0;
    release_block(b);
  }
}

// A fiber serves its thread index in every block of a launch: after the kernel returns it parks,
// and the next block resumes it at the top of the loop (no new context, no system call).
inline void fiber_main() {
  for (;;) {
    g_entry_body(g_entry_arg);
    finish_thread();
    if (_setjmp(g_cur->jb) == 0) _longjmp(g_block->sched_jb, 1);
  }
}

inline std::string deadlock_report(Block* b) {
  std::string s = "deadlock in block (" + std::to_string(g_block_idx.x) + "," + std::to_string(g_block_idx.y) + ","
                  + std::to_string(g_block_idx.z) + "): ";
  if (b->waiting)
    s += std::to_string(b->waiting) + " thread(s) wait in __syncthreads (line " + std::to_string(b->site) + ") for "
         + std::to_string(b->n - b->waiting - b->done) + " that never reach it; ";
  for (size_t w = 0; w < b->warps.size(); ++w)
    for (auto& g : b->warps[w]) {
      unsigned missing = g.mask & ~g.arrived;
      unsigned exited = 0;
      for (int l = 0; l < 32; ++l)
        if ((missing >> l) & 1u && b->fibers[w * 32 + l].state == St::Done) exited |= 1u << l;
      char buf[200];
      std::snprintf(buf, sizeof buf, "warp %zu: %s with mask 0x%08x waits for lanes 0x%08x (0x%08x of them exited); ",
                    w, op_name(g.op), g.mask, missing, exited);
      s += buf;
    }
  return s + "on a GPU this kernel hangs";
}

// Schedules: launch k runs its ready fibers in forward order (k % 3 == 0), reverse (1) or a
// seeded random order drawn afresh at every round (2).
inline void init_fibers(Block& b, int n, void (*body)(void*), void* arg) {
  b.fibers.assign(n, Fiber{});
  b.warps.assign((n + 31) / 32, {});
  b.n = n;
  g_block = &b;
  g_entry_body = body; g_entry_arg = arg;
  ucontext_t model;
  getcontext(&model);  // once per launch; each fiber's context is a copy given its own stack
  unsigned bx = g_block_dim.x, by = g_block_dim.y;
  for (int i = 0; i < n; ++i) {
    Fiber& f = b.fibers[i];
    f.tid = uint3{(unsigned)(i % bx), (unsigned)((i / bx) % by), (unsigned)(i / (bx * by))};
    f.lane = i & 31; f.warp = i >> 5;
    f.ctx = model;
#if defined(__x86_64__) && defined(__GLIBC__)
    f.ctx.uc_mcontext.fpregs = &f.ctx.__fpregs_mem;  // the copy's own floating-point state, not the model's
#endif
    f.ctx.uc_stack.ss_sp = g_stacks.get(i);
    f.ctx.uc_stack.ss_size = g_stacks.bytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_main, 0);
  }
}

inline void run_block(Block& b, unsigned long long schedule) {
  int n = b.n;
  b.done = 0; b.waiting = 0; b.fault.clear(); b.fault_code = cudaSuccess;
  for (auto& w : b.warps) w.clear();
  for (auto& f : b.fibers) { f.state = St::Ready; f.op = Op::None; }
  std::vector<int> order(n);
  std::mt19937_64 rng(g_seed ^ (schedule * 0x2545F4914F6CDD1Dull) ^ ((unsigned long long)g_block_idx.x << 20));
  int mode = (int)(schedule % 3);
  while (b.done < n) {
    for (int i = 0; i < n; ++i) order[i] = mode == 1 ? n - 1 - i : i;
    if (mode == 2) std::shuffle(order.begin(), order.end(), rng);
    bool ran = false;
    for (int i : order) {
      Fiber& f = b.fibers[i];
      if (f.state != St::Ready) continue;
      ran = true;
      g_cur = &f;
      if (_setjmp(b.sched_jb) == 0) {
        if (!f.started) { f.started = true; swapcontext(&b.sched, &f.ctx); }
        else _longjmp(f.jb, 1);
      }
      g_cur = nullptr;
      if (g_signal_fault[0] && b.fault.empty()) { b.fault = g_signal_fault; b.fault_code = cudaErrorIllegalAddress; }
      if (!b.fault.empty()) return;
    }
    if (!ran) { b.fault = deadlock_report(&b); b.fault_code = cudaErrorLaunchFailure; return; }
  }
}

// The fast path for launches whose sources hold no barrier, warp collective or cooperative-groups
// sync (the rewrite decides, over all the module's sources): each thread is a plain call on the
// launching stack, in the launch's schedule order; no fiber, no context switch.
inline void run_block_plain(Block& b, unsigned long long schedule, void (*body)(void*), void* arg) {
  int n = b.n;
  b.done = 0; b.waiting = 0; b.fault.clear(); b.fault_code = cudaSuccess;
  Fiber& f = b.fibers[0];
  unsigned bx = g_block_dim.x, by = g_block_dim.y;
  int mode = (int)(schedule % 3);
  static thread_local std::vector<int> order;
  order.resize(n);
  for (int i = 0; i < n; ++i) order[i] = mode == 1 ? n - 1 - i : i;
  if (mode == 2) {
    std::mt19937_64 rng(g_seed ^ (schedule * 0x2545F4914F6CDD1Dull) ^ ((unsigned long long)g_block_idx.x << 20)
                        ^ ((unsigned long long)g_block_idx.y << 40));
    std::shuffle(order.begin(), order.end(), rng);
  }
  for (int k = 0; k < n; ++k) {
    int i = order[k];
    f.tid = uint3{(unsigned)(i % bx), (unsigned)((i / bx) % by), (unsigned)(i / (bx * by))};
    f.lane = i & 31; f.warp = i >> 5; f.state = St::Ready;
    g_cur = &f;
    if (_setjmp(b.sched_jb) == 0) body(arg);
    g_cur = nullptr;
    if (g_signal_fault[0] && b.fault.empty()) { b.fault = g_signal_fault; b.fault_code = cudaErrorIllegalAddress; }
    if (!b.fault.empty()) return;
  }
}

// ----- shared memory against guard pages -------------------------------------------------------------
// Dynamic and static shared memory each live in an arena of this library: GUARD_BYTES of PROT_NONE on
// both sides of SHARED_CAPACITY read-write bytes. A launch places its window at the arena's lower end
// (underflow mode) or so that it ends at the upper guard (overflow mode), alternating per launch, so
// an access outside the block's window faults, as on a GPU (which faults only outside the window).
// Every block starts with its windows filled with 0xFF bytes (NaN for floats), as uninitialised
// shared memory is garbage on a GPU.
inline constexpr size_t SHARED_CAPACITY = 256 * 1024;

struct Arena {
  uintptr_t base = 0, lo = 0, hi = 0;  // the mapping, and its read-write part [lo, hi)
  void map() {
    if (base) return;
    size_t total = guard::GUARD_BYTES * 2 + SHARED_CAPACITY;
    void* p = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw Error(cudaErrorMemoryAllocation, "no memory for the shared-memory arena");
    base = reinterpret_cast<uintptr_t>(p); lo = base + guard::GUARD_BYTES; hi = lo + SHARED_CAPACITY;
    mprotect(reinterpret_cast<void*>(lo), SHARED_CAPACITY, PROT_READ | PROT_WRITE);
  }
  bool in_guard(uintptr_t a) const {
    return base && a >= base && a < hi + guard::GUARD_BYTES && (a < lo || a >= hi);
  }
};
inline Arena g_dyn_arena, g_static_arena;

// The static shared variables of one launch site, in first-use order: offsets stay fixed across its
// launches, so from the second launch on its whole window is known and placed against a guard.
struct StaticLayout {
  std::vector<const void*> keys;
  std::vector<size_t> offsets, sizes;
  size_t total = 0, align = 1;
};
inline StaticLayout* g_layout = nullptr;
inline uintptr_t g_static_base = 0;     // where offset 0 of the window lies in this launch
inline size_t g_static_known = 0;       // the window's bytes known when the launch started
inline bool g_overflow_mode = false;
struct Region { void* p; size_t n; };
inline std::vector<Region> g_shared_regions;  // this launch's windows, poisoned before every block

inline void poison_shared() { for (auto& r : g_shared_regions) std::memset(r.p, 0xff, r.n); }

inline size_t natural_align(size_t bytes, size_t at_least) {
  size_t low = bytes ? std::min<size_t>(16, bytes & (~bytes + 1)) : 1;
  return std::max(low, at_least);
}

// The storage of a `__shared__` declaration (the rewrite turns each into a reference to this).
inline void* static_shared_slot(const void* key, size_t bytes, size_t align) {
  StaticLayout* l = g_layout;
  if (l == nullptr || g_block == nullptr) throw Error(cudaErrorNotSupported, "__shared__ memory used outside a kernel");
  for (size_t i = 0; i < l->keys.size(); ++i)
    if (l->keys[i] == key) {
      size_t off = l->offsets[i];
      if (off + l->sizes[i] <= g_static_known) return reinterpret_cast<void*>(g_static_base + off);
      if (!g_overflow_mode) return reinterpret_cast<void*>(g_static_base + off);
      return reinterpret_cast<void*>(g_static_arena.lo + off);  // first met in this launch: below the window
    }
  size_t off = (l->total + align - 1) / align * align;
  if (off + bytes > 48 * 1024)
    fault(cudaErrorLaunchOutOfResources, "static shared memory past 48 KiB per block");
  l->keys.push_back(key); l->offsets.push_back(off); l->sizes.push_back(bytes);
  l->total = off + bytes; l->align = std::max(l->align, align);
  void* p = reinterpret_cast<void*>((g_overflow_mode ? g_static_arena.lo : g_static_base) + off);
  std::memset(p, 0xff, bytes);
  g_shared_regions.push_back(Region{p, bytes});
  return p;
}

template <class T> T& static_shared(const void* key, size_t align = 0) {
  return *static_cast<T*>(static_shared_slot(key, sizeof(T), natural_align(sizeof(T), std::max(alignof(T), align))));
}

// ----- faults of a running kernel: a signal on a guard page becomes a launch failure ------------------
inline pthread_t g_launch_thread;
inline struct sigaction g_prev_segv, g_prev_bus;
inline bool g_handler_installed = false;

inline bool describe_shared(uintptr_t a, bool write, char* out, size_t n) {
  const char* what = write ? "write" : "read";
  if (g_dyn_arena.in_guard(a)) {
    uintptr_t start = reinterpret_cast<uintptr_t>(g_dyn_smem), end = start + g_dyn_smem_bytes;
    if (a >= end)
      std::snprintf(out, n, "out-of-bounds dynamic shared %s, %zu bytes past the end of the launch's %zu-byte "
                    "extern __shared__ window", what, (size_t)(a - end), g_dyn_smem_bytes);
    else
      std::snprintf(out, n, "out-of-bounds dynamic shared %s, %zu bytes before the start of the launch's %zu-byte "
                    "extern __shared__ window", what, (size_t)(start - a), g_dyn_smem_bytes);
    return true;
  }
  if (g_static_arena.in_guard(a)) {
    uintptr_t start = g_static_base, end = start + g_static_known;
    if (a >= end)
      std::snprintf(out, n, "out-of-bounds static shared %s, %zu bytes past the end of the block's %zu-byte "
                    "__shared__ window", what, (size_t)(a - end), g_static_known);
    else
      std::snprintf(out, n, "out-of-bounds static shared %s, %zu bytes before the start of the block's %zu-byte "
                    "__shared__ window", what, (size_t)(start - a), g_static_known);
    return true;
  }
  return false;
}

inline void chain_signal(int sig, siginfo_t* info, void* uctx) {
  const struct sigaction& prev = sig == SIGSEGV ? g_prev_segv : g_prev_bus;
  if (prev.sa_flags & SA_SIGINFO) { if (prev.sa_sigaction) prev.sa_sigaction(sig, info, uctx); return; }
  if (prev.sa_handler == SIG_DFL || prev.sa_handler == SIG_IGN) { sigaction(sig, &prev, nullptr); return; }
  prev.sa_handler(sig);  // returning re-executes the access, under whatever handler is left
}

inline bool describe_stack(uintptr_t a, char* out, size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (unsigned char* b : g_stacks.bases) {
    uintptr_t top = reinterpret_cast<uintptr_t>(b);
    if (a < top && a >= top - page) {
      std::snprintf(out, n, "stack overflow of a CUDA thread (the emulation gives each thread %d KiB of stack)",
                    (int)(AGENTFORGE_EMU_STACK_BYTES / 1024));
      return true;
    }
  }
  return false;
}

inline void on_fault(int sig, siginfo_t* info, void* uctx) {
  if (g_block != nullptr && g_cur != nullptr && info->si_code > 0 && pthread_equal(pthread_self(), g_launch_thread)) {
    uintptr_t a = reinterpret_cast<uintptr_t>(info->si_addr);
    bool write = false;
#if defined(__x86_64__) && defined(__linux__)
    write = (static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#endif
    const guard::Api* api = guard::api();
    char* out = g_signal_fault;
    size_t n = sizeof g_signal_fault;
    if (describe_shared(a, write, out, n) || describe_stack(a, out, n) || (api && api->describe(a, write, out, n))) {
      g_cur->state = St::Done;
      _longjmp(g_block->sched_jb, 1);  // back to the block's scheduler, which ends the launch
    }
  }
  chain_signal(sig, info, uctx);
}

// Installed at the first launch (over Python's faulthandler, to which other faults go on); each
// launching thread gets an alternate signal stack, so a fault on a thread's own stack is handled too.
inline void prepare_fault_handling() {
  if (!g_handler_installed) {
    struct sigaction sa{};
    sa.sa_sigaction = &on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;  // NODEFER: left by _longjmp, not blocked afterwards
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
    g_handler_installed = true;
  }
  static thread_local bool has_stack = false;
  if (!has_stack) {
    stack_t cur{};
    sigaltstack(nullptr, &cur);
    if (cur.ss_flags & SS_DISABLE) {
      stack_t ss{};
      ss.ss_size = 64 * 1024;
      ss.ss_sp = std::malloc(ss.ss_size);  // kept for the thread's life
      sigaltstack(&ss, nullptr);
    }
    has_stack = true;
  }
  g_launch_thread = pthread_self();
  g_signal_fault[0] = 0;
}

// ----- launches -----------------------------------------------------------------------------------
inline dim3 as_dim3(dim3 d) { return d; }
inline dim3 as_dim3(uint3 d) { return dim3(d); }
template <class T, class = std::enable_if_t<std::is_integral<T>::value>> inline dim3 as_dim3(T v) {
  return dim3((unsigned)v);
}

inline cudaError_t check_config(dim3 g, dim3 b, size_t smem) {
  unsigned long long threads = (unsigned long long)b.x * b.y * b.z;
  if (g.x == 0 || g.y == 0 || g.z == 0 || b.x == 0 || b.y == 0 || b.z == 0) return cudaErrorInvalidConfiguration;
  if (threads > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) return cudaErrorInvalidConfiguration;
  if (g.x > 2147483647u || g.y > 65535u || g.z > 65535u) return cudaErrorInvalidConfiguration;
  if (smem > g_smem_optin || smem > 227 * 1024) return cudaErrorInvalidValue;
  return cudaSuccess;
}

template <class F> struct Payload { F* fn; };

template <class F> void trampoline(void* p) { (*static_cast<F*>(p))(); }

// `kernel<<<grid, block, smem, stream>>>(args...)` becomes `emu::launch(grid, block, smem, stream,
// [&](auto&&... a) { kernel(a...); }, args...)`: the arguments are evaluated once, on the host,
// and every thread gets its own copy, as a GPU passes them by value.
template <bool Plain = false, class G, class B, class K, class... A>
void launch(G grid, B block, size_t smem, cudaStream_t, K&& kernel, A&&... args) {
  std::lock_guard<std::recursive_mutex> lock(g_mutex);
  if (g_block != nullptr) throw Error(cudaErrorNotSupported, "a kernel launched from device code (dynamic parallelism) cannot run in the CPU emulation");
  dim3 g = as_dim3(grid), b = as_dim3(block);
  cudaError_t cfg = check_config(g, b, smem);
  if (cfg != cudaSuccess) { g_last_error = cfg; return; }  // nothing runs, as on a GPU
  auto params = std::make_tuple(std::decay_t<A>(args)...);
  auto body = [&]() { std::apply([&](auto&... a) { kernel(a...); }, params); };
  using Body = decltype(body);
  static StaticLayout layout;  // one per launch site (this template's instantiation)
  Block blk;
  unsigned long long schedule = g_launches++;
  prepare_fault_handling();
  g_overflow_mode = (schedule & 1) == 0;  // launches alternate the guarded end of every window
  g_dyn_arena.map(); g_static_arena.map();
  uintptr_t dyn = g_overflow_mode ? (g_dyn_arena.hi - smem) & ~(uintptr_t)(natural_align(smem, 1) - 1) : g_dyn_arena.lo;
  g_layout = &layout; g_static_known = layout.total;
  g_static_base = g_overflow_mode ? (g_static_arena.hi - layout.total) & ~(uintptr_t)(layout.align - 1)
                                  : g_static_arena.lo;
  g_shared_regions.clear();
  if (smem) g_shared_regions.push_back(Region{reinterpret_cast<void*>(dyn), smem});
  if (layout.total) g_shared_regions.push_back(Region{reinterpret_cast<void*>(g_static_base), layout.total});
  g_grid_dim = g; g_block_dim = b; g_dyn_smem = reinterpret_cast<unsigned char*>(dyn); g_dyn_smem_bytes = smem;
  int n = (int)(b.x * b.y * b.z);
  struct Reset {
    ~Reset() {
      g_block = nullptr; g_cur = nullptr; g_dyn_smem = nullptr; g_layout = nullptr; g_shared_regions.clear();
      g_plain_launch = false;
    }
  } reset;
  if (Plain) { blk.fibers.assign(1, Fiber{}); blk.n = n; g_block = &blk; g_plain_launch = true; }
  else init_fibers(blk, n, &trampoline<Body>, &body);
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) {
        g_block_idx = uint3{x, y, z};
        poison_shared();
        if (Plain) run_block_plain(blk, schedule, &trampoline<Body>, &body);
        else run_block(blk, schedule);
        if (!blk.fault.empty()) {
          cudaError_t code = blk.fault_code;
          if (code == cudaErrorLaunchOutOfResources && blk.fault.rfind("launch bounds", 0) == 0) {
            g_last_error = code;  // a launch error: nothing ran, the host learns it from cudaGetLastError
            return;
          }
          g_sticky_error = g_last_error = code;
          throw Error(code, "CUDA error (CPU emulation): " + std::string(error_name(code)) + ": " + blk.fault);
        }
      }
}

// The first statement of every __global__ function (inserted by the source rewrite).
inline bool launch_bounds_exceeded(long long max_threads, long long = 0, long long = 0) {
  long long threads = (long long)g_block_dim.x * g_block_dim.y * g_block_dim.z;
  if (threads <= max_threads) return false;
  if (g_block->fault.empty()) {
    g_block->fault = "launch bounds: " + std::to_string(threads) + " threads per block, __launch_bounds__ allows "
                     + std::to_string(max_threads);
    g_block->fault_code = cudaErrorLaunchOutOfResources;
  }
  return true;
}

inline void* dynamic_smem() { return g_dyn_smem; }


[[noreturn]] inline void needs_gpu(const char* construct) {
  throw Error(cudaErrorNotSupported, std::string("needs a GPU: ") + construct + " cannot run in the CPU emulation");
}

}  // namespace emu

#define threadIdx (::emu::tid())
#define blockIdx (::emu::g_block_idx)
#define blockDim (::emu::g_block_dim)
#define gridDim (::emu::g_grid_dim)
inline constexpr int warpSize = 32;

#include "agentforge_emu/device_functions.h"
#include "agentforge_emu/host_api.h"
