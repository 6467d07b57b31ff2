// Device-side functions of the CUDA emulation: barriers, warp collectives, atomics, loads and
// stores with cache hints, math intrinsics, __half and __nv_bfloat16 (with torch's
// __CUDA_NO_HALF_OPERATORS__ / _CONVERSIONS__ semantics: no operators, no implicit conversions).
#pragma once

// ----- barriers and warp collectives -----------------------------------------------------------
#define __syncthreads() ::emu::block_barrier(__LINE__, 0, 0)
#define __syncthreads_count(p) ::emu::block_barrier(__LINE__, 1, (p))
#define __syncthreads_and(p) ::emu::block_barrier(__LINE__, 2, (p))
#define __syncthreads_or(p) ::emu::block_barrier(__LINE__, 3, (p))
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::emu::warp_collective(::emu::Op::Sync, mask, 0, 32, nullptr, 0, 0); }
inline void __threadfence() {}
inline void __threadfence_block() {}
inline void __threadfence_system() {}
inline void __nanosleep(unsigned) {}
inline long long clock64() { return (long long)(++::emu::g_clock); }
inline unsigned __activemask() {
  unsigned m = 0;
  auto* b = ::emu::g_block;
  int w = ::emu::g_cur->warp;
  for (int l = 0; l < 32 && w * 32 + l < b->n; ++l)
    if (b->fibers[w * 32 + l].state != ::emu::St::Done) m |= 1u << l;
  return m;
}
inline unsigned __lanemask_lt() { return (1u << ::emu::g_cur->lane) - 1u; }

template <class T> inline T __shfl_sync(unsigned m, T v, int src, int w = 32) { return ::emu::shfl(::emu::Op::Idx, m, v, src, w); }
template <class T> inline T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return ::emu::shfl(::emu::Op::Up, m, v, (int)d, w); }
template <class T> inline T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return ::emu::shfl(::emu::Op::Down, m, v, (int)d, w); }
template <class T> inline T __shfl_xor_sync(unsigned m, T v, int x, int w = 32) { return ::emu::shfl(::emu::Op::Xor, m, v, x, w); }
inline unsigned __ballot_sync(unsigned m, int p) { return ::emu::vote(::emu::Op::Ballot, m, p); }
inline int __any_sync(unsigned m, int p) { return (int)::emu::vote(::emu::Op::Any, m, p); }
inline int __all_sync(unsigned m, int p) { return (int)::emu::vote(::emu::Op::All, m, p); }
template <class T> inline unsigned __match_any_sync(unsigned m, T v) {
  unsigned long long raw = 0; std::memcpy(&raw, &v, sizeof(T) < 8 ? sizeof(T) : 8);
  ::emu::warp_collective(::emu::Op::Match, m, 0, 32, &raw, 8, 0);
  unsigned r; std::memcpy(&r, ::emu::g_cur->out, 4); return r;
}
#define AFEMU_REDUCE(NAME, OP, T, SIGNED) inline T NAME(unsigned m, T v) { \
  ::emu::warp_collective(::emu::Op::OP, m, SIGNED, 32, &v, 4, 0); T r; std::memcpy(&r, ::emu::g_cur->out, 4); return r; }
AFEMU_REDUCE(__reduce_add_sync, RedAdd, unsigned, 0) AFEMU_REDUCE(__reduce_add_sync, RedAdd, int, 1)
AFEMU_REDUCE(__reduce_min_sync, RedMin, unsigned, 0) AFEMU_REDUCE(__reduce_min_sync, RedMin, int, 1)
AFEMU_REDUCE(__reduce_max_sync, RedMax, unsigned, 0) AFEMU_REDUCE(__reduce_max_sync, RedMax, int, 1)
AFEMU_REDUCE(__reduce_and_sync, RedAnd, unsigned, 0) AFEMU_REDUCE(__reduce_or_sync, RedOr, unsigned, 0)
AFEMU_REDUCE(__reduce_xor_sync, RedXor, unsigned, 0)
#undef AFEMU_REDUCE

// ----- loads and stores with cache hints ----------------------------------------------------------
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ----- integer and bit intrinsics -------------------------------------------------------------------
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) { unsigned r = 0; for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i); return r; }
inline int __mul24(int a, int b) { return a * b; }
inline unsigned __umul24(unsigned a, unsigned b) { return a * b; }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) { return (unsigned long long)(((unsigned __int128)a * b) >> 64); }
inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline int __float_as_int(float f) { int x; std::memcpy(&x, &f, 4); return x; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned x; std::memcpy(&x, &f, 4); return x; }
inline double __longlong_as_double(long long x) { double d; std::memcpy(&d, &x, 8); return d; }
inline long long __double_as_longlong(double d) { long long x; std::memcpy(&x, &d, 8); return x; }

// min/max as CUDA's math headers declare them for the host compiler's unqualified calls.
#define AFEMU_MINMAX(T) inline T min(T a, T b) { return b < a ? b : a; } inline T max(T a, T b) { return a < b ? b : a; }
AFEMU_MINMAX(int) AFEMU_MINMAX(unsigned) AFEMU_MINMAX(long) AFEMU_MINMAX(unsigned long) AFEMU_MINMAX(long long)
AFEMU_MINMAX(unsigned long long)
#undef AFEMU_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline long long min(long long a, int b) { return min(a, (long long)b); }
inline long long min(int a, long long b) { return min((long long)a, b); }
inline long long max(long long a, int b) { return max(a, (long long)b); }
inline long long max(int a, long long b) { return max((long long)a, b); }
inline long min(long a, int b) { return min(a, (long)b); }
inline long min(int a, long b) { return min((long)a, b); }
inline long max(long a, int b) { return max(a, (long)b); }
inline long max(int a, long b) { return max((long)a, b); }

// ----- float intrinsics (the approximate ones computed exactly: a GPU's error bound is looser) -----
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __log10f(float x) { return std::log10(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline void __sincosf(float x, float* s, float* c) { *s = std::sin(x); *c = std::cos(x); }
inline float __powf(float a, float b) { return std::pow(a, b); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x < 0.f ? 0.f : (x > 1.f ? 1.f : x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fadd_rz(float a, float b) { return a + b; }
inline float __fmul_rz(float a, float b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline int __float2int_rn(float x) { return (int)std::nearbyint(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)std::floor(x); }
inline int __float2int_ru(float x) { return (int)std::ceil(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)std::nearbyint(x); }
inline unsigned __float2uint_rz(float x) { return (unsigned)x; }
inline long long __float2ll_rn(float x) { return (long long)std::nearbyint(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline int __double2int_rn(double x) { return (int)std::nearbyint(x); }
inline float __double2float_rn(double x) { return (float)x; }
inline float normcdff(float x) { return 0.5f * std::erfc(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752); }
inline float sinpif(float x) { return std::sin(3.14159265358979323846f * x); }
inline float cospif(float x) { return std::cos(3.14159265358979323846f * x); }

// ----- __half and __nv_bfloat16 -------------------------------------------------------------------
struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };
struct alignas(2) __half {
  unsigned short __x;
  __half() = default;
  constexpr __half(__half_raw r) : __x(r.x) {}
  __half(c10::Half h) : __x(h.x) {}
  operator __half_raw() const { return __half_raw{__x}; }
  operator c10::Half() const { return c10::Half(__x, c10::Half::from_bits()); }
};
struct alignas(2) __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  constexpr __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
  __nv_bfloat16(c10::BFloat16 h) : __x(h.x) {}
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
  operator c10::BFloat16() const { return c10::BFloat16(__x, c10::BFloat16::from_bits()); }
};
struct alignas(4) __half2 { __half x, y; };
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

inline float __half2float(__half h) { return c10::detail::fp16_ieee_to_fp32_value(h.__x); }
inline __half __float2half(float f) { return __half(__half_raw{c10::detail::fp16_ieee_from_fp32_value(f)}); }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline __half __double2half(double d) { return __float2half((float)d); }
inline float __bfloat162float(__nv_bfloat16 h) { uint32_t u = (uint32_t)h.__x << 16; float f; std::memcpy(&f, &u, 4); return f; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(__nv_bfloat16_raw{c10::detail::round_to_nearest_even(f)}); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __float2bfloat16_rn((float)d); }
inline __nv_bfloat16 __float2bfloat16_rz(float f) { uint32_t u; std::memcpy(&u, &f, 4); return __nv_bfloat16(__nv_bfloat16_raw{(unsigned short)(u >> 16)}); }
inline __half __int2half_rn(int i) { return __float2half((float)i); }
inline __nv_bfloat16 __int2bfloat16_rn(int i) { return __float2bfloat16_rn((float)i); }
inline int __half2int_rn(__half h) { return (int)std::nearbyint(__half2float(h)); }
inline int __half2int_rz(__half h) { return (int)__half2float(h); }
inline int __bfloat162int_rn(__nv_bfloat16 h) { return (int)std::nearbyint(__bfloat162float(h)); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short x) { return __half(__half_raw{x}); }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return __nv_bfloat16(__nv_bfloat16_raw{x}); }

#define AFEMU_H(H, TOF, FROMF, H2, F2MAKE)                                                                   \
  inline float afemu_f(H a) { return TOF(a); }                                                             \
  inline H __hadd(H a, H b) { return FROMF(TOF(a) + TOF(b)); }                                              \
  inline H __hsub(H a, H b) { return FROMF(TOF(a) - TOF(b)); }                                              \
  inline H __hmul(H a, H b) { return FROMF(TOF(a) * TOF(b)); }                                              \
  inline H __hdiv(H a, H b) { return FROMF(TOF(a) / TOF(b)); }                                              \
  inline H __hadd_rn(H a, H b) { return __hadd(a, b); }                                                    \
  inline H __hmul_rn(H a, H b) { return __hmul(a, b); }                                                    \
  inline H __hneg(H a) { H r = a; r.__x ^= 0x8000u; return r; }                                            \
  inline H __habs(H a) { H r = a; r.__x &= 0x7fffu; return r; }                                            \
  inline H __hfma(H a, H b, H c) { return FROMF(std::fma(TOF(a), TOF(b), TOF(c))); }                        \
  inline H __hmax(H a, H b) { return TOF(a) < TOF(b) ? b : a; }                                            \
  inline H __hmin(H a, H b) { return TOF(b) < TOF(a) ? b : a; }                                            \
  inline bool __heq(H a, H b) { return TOF(a) == TOF(b); }                                                 \
  inline bool __hne(H a, H b) { return TOF(a) != TOF(b); }                                                 \
  inline bool __hlt(H a, H b) { return TOF(a) < TOF(b); }                                                  \
  inline bool __hle(H a, H b) { return TOF(a) <= TOF(b); }                                                 \
  inline bool __hgt(H a, H b) { return TOF(a) > TOF(b); }                                                  \
  inline bool __hge(H a, H b) { return TOF(a) >= TOF(b); }                                                 \
  inline bool __hisnan(H a) { return std::isnan(TOF(a)); }                                                 \
  inline bool __hisinf(H a) { return std::isinf(TOF(a)); }                                                 \
  inline H hexp(H a) { return FROMF(std::exp(TOF(a))); }                                                   \
  inline H hlog(H a) { return FROMF(std::log(TOF(a))); }                                                   \
  inline H hsqrt(H a) { return FROMF(std::sqrt(TOF(a))); }                                                 \
  inline H hrsqrt(H a) { return FROMF(1.0f / std::sqrt(TOF(a))); }                                         \
  inline H hrcp(H a) { return FROMF(1.0f / TOF(a)); }                                                      \
  inline H htanh(H a) { return FROMF(std::tanh(TOF(a))); }                                                 \
  inline H hfloor(H a) { return FROMF(std::floor(TOF(a))); }                                               \
  inline H hceil(H a) { return FROMF(std::ceil(TOF(a))); }                                                 \
    inline H2 __hadd2(H2 a, H2 b) { return H2{__hadd(a.x, b.x), __hadd(a.y, b.y)}; }                         \
  inline H2 __hsub2(H2 a, H2 b) { return H2{__hsub(a.x, b.x), __hsub(a.y, b.y)}; }                         \
  inline H2 __hmul2(H2 a, H2 b) { return H2{__hmul(a.x, b.x), __hmul(a.y, b.y)}; }                         \
  inline H2 __h2div(H2 a, H2 b) { return H2{__hdiv(a.x, b.x), __hdiv(a.y, b.y)}; }                         \
  inline H2 __hfma2(H2 a, H2 b, H2 c) { return H2{__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }         \
  inline H2 __hmax2(H2 a, H2 b) { return H2{__hmax(a.x, b.x), __hmax(a.y, b.y)}; }                         \
  inline H2 __hmin2(H2 a, H2 b) { return H2{__hmin(a.x, b.x), __hmin(a.y, b.y)}; }                         \
  inline H2 __hneg2(H2 a) { return H2{__hneg(a.x), __hneg(a.y)}; }                                         \
  inline H2 __habs2(H2 a) { return H2{__habs(a.x), __habs(a.y)}; }                                         \
  inline H2 h2exp(H2 a) { return H2{hexp(a.x), hexp(a.y)}; }                                               \
  inline H2 __halves2##H2(H a, H b) { return H2{a, b}; }                                                   \
  inline H2 __lowhigh2highlow(H2 a) { return H2{a.y, a.x}; }                                               \
  inline float2 F2MAKE(H2 a) { return float2{TOF(a.x), TOF(a.y)}; }                                        \
  inline float __low2float(H2 a) { return TOF(a.x); }                                                      \
  inline float __high2float(H2 a) { return TOF(a.y); }

AFEMU_H(__half, __half2float, __float2half, __half2, __half22float2)
AFEMU_H(__nv_bfloat16, __bfloat162float, __float2bfloat16_rn, __nv_bfloat162, __bfloat1622float2)
#undef AFEMU_H
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
inline __half __low2half(__half2 a) { return a.x; }
inline __half __high2half(__half2 a) { return a.y; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 a) { return a.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 a) { return a.y; }
inline __half2 __half2half2(__half a) { return __half2{a, a}; }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162{a, a}; }
inline __half2 __float2half2_rn(float f) { __half h = __float2half(f); return __half2{h, h}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__float2half(a), __float2half(b)}; }
inline __half2 __float22half2_rn(float2 v) { return __floats2half2_rn(v.x, v.y); }
inline __nv_bfloat162 __float2bfloat162_rn(float f) { auto h = __float2bfloat16_rn(f); return __nv_bfloat162{h, h}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return __floats2bfloat162_rn(v.x, v.y); }

// ----- atomics (the fibers of a launch never run at the same time: plain read-modify-writes) -----
template <class T> inline T afemu_rmw(T* p, T v, T (*f)(T, T)) { T old = *p; *p = f(old, v); return old; }
#define AFEMU_ATOMIC(T)                                                                                     \
  inline T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }                                         \
  inline T atomicSub(T* p, T v) { T o = *p; *p = o - v; return o; }                                         \
  inline T atomicExch(T* p, T v) { T o = *p; *p = v; return o; }                                            \
  inline T atomicAdd_block(T* p, T v) { return atomicAdd(p, v); }                                           \
  inline T atomicAdd_system(T* p, T v) { return atomicAdd(p, v); }
AFEMU_ATOMIC(int) AFEMU_ATOMIC(unsigned) AFEMU_ATOMIC(unsigned long long) AFEMU_ATOMIC(float) AFEMU_ATOMIC(double)
#undef AFEMU_ATOMIC
inline long long atomicAdd(long long* p, long long v) { long long o = *p; *p = o + v; return o; }
#define AFEMU_ATOMIC_INT(T)                                                                                 \
  inline T atomicMax(T* p, T v) { T o = *p; *p = o < v ? v : o; return o; }                                \
  inline T atomicMin(T* p, T v) { T o = *p; *p = v < o ? v : o; return o; }                                \
  inline T atomicAnd(T* p, T v) { T o = *p; *p = o & v; return o; }                                         \
  inline T atomicOr(T* p, T v) { T o = *p; *p = o | v; return o; }                                          \
  inline T atomicXor(T* p, T v) { T o = *p; *p = o ^ v; return o; }                                         \
  inline T atomicCAS(T* p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
AFEMU_ATOMIC_INT(int) AFEMU_ATOMIC_INT(unsigned) AFEMU_ATOMIC_INT(unsigned long long) AFEMU_ATOMIC_INT(long long)
#undef AFEMU_ATOMIC_INT
inline unsigned short atomicCAS(unsigned short* p, unsigned short cmp, unsigned short v) { unsigned short o = *p; if (o == cmp) *p = v; return o; }
inline unsigned atomicInc(unsigned* p, unsigned v) { unsigned o = *p; *p = o >= v ? 0 : o + 1; return o; }
inline unsigned atomicDec(unsigned* p, unsigned v) { unsigned o = *p; *p = (o == 0 || o > v) ? v : o - 1; return o; }
inline __half atomicAdd(__half* p, __half v) { __half o = *p; *p = __hadd(o, v); return o; }
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) { __nv_bfloat16 o = *p; *p = __hadd(o, v); return o; }
inline __half2 atomicAdd(__half2* p, __half2 v) { __half2 o = *p; *p = __hadd2(o, v); return o; }
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) { __nv_bfloat162 o = *p; *p = __hadd2(o, v); return o; }
inline c10::Half atomicAdd(c10::Half* p, c10::Half v) { c10::Half o = *p; *p = o + v; return o; }
inline c10::BFloat16 atomicAdd(c10::BFloat16* p, c10::BFloat16 v) { c10::BFloat16 o = *p; *p = o + v; return o; }
inline __half atomicMax(__half* p, __half v) { __half o = *p; *p = __hmax(o, v); return o; }
inline __half atomicMin(__half* p, __half v) { __half o = *p; *p = __hmin(o, v); return o; }
inline __nv_bfloat16 atomicMax(__nv_bfloat16* p, __nv_bfloat16 v) { auto o = *p; *p = __hmax(o, v); return o; }
inline __nv_bfloat16 atomicMin(__nv_bfloat16* p, __nv_bfloat16 v) { auto o = *p; *p = __hmin(o, v); return o; }
