// agentforge CUDA emulation: the launch entries of a lean `native.load_cuda` module (an `extern "C"`
// kernel source without torch headers), called from Python through ctypes.
//
// `AGENTFORGE_LEAN_KERNEL(k, plain)` (appended by the build for each `extern "C"` kernel) defines
//   int agentforge_launch_k(gx, gy, gz, bx, by, bz, smem, void** args, char* message, size_t n)
//   int agentforge_params_k(size_t* sizes, int capacity)
// and the library has `agentforge_device_reset()` (cudaDeviceReset: the sticky error cleared).
// The launch reads parameter i from `args[i]` as the kernel's own parameter type, as the driver's
// cuLaunchKernel reads its kernelParams, and runs the kernel through `emu::launch` (limits,
// schedules, guard pages, faults). It returns 0 or the CUDA error with its message: a launch error
// (invalid configuration, launch bounds), a fault of a running kernel, or the sticky error of an
// earlier fault, which spoils every later launch as it spoils a GPU context.
#pragma once

#include <cstddef>
#include <cstdio>
#include <exception>
#include <type_traits>
#include <utility>

#include "agentforge_emu/runtime.h"

namespace emu::lean {

inline int fail(cudaError_t code, const char* what, char* message, size_t n) {
  std::snprintf(message, n, "%s", what);
  return code == cudaSuccess ? (int)cudaErrorUnknown : (int)code;
}

template <bool Plain, class... P, size_t... I>
int launch_unpacked(void (*kernel)(P...), std::index_sequence<I...>, dim3 grid, dim3 block, size_t smem,
                    void** args, char* message, size_t n) {
  if (::emu::g_sticky_error != cudaSuccess) {
    std::string what = std::string("CUDA error (CPU emulation): ") + ::emu::error_name(::emu::g_sticky_error)
                       + " (sticky: an earlier kernel of this process faulted, as a GPU context stays spoilt)";
    return fail(::emu::g_sticky_error, what.c_str(), message, n);
  }
  try {
    ::emu::launch<Plain>(grid, block, smem, nullptr, [&](auto&... a) { kernel(a...); },
                         *static_cast<std::decay_t<P>*>(args[I])...);
  } catch (const ::emu::Error& e) {
    return fail(e.code, e.what(), message, n);
  } catch (const std::exception& e) {
    return fail(cudaErrorUnknown, e.what(), message, n);
  }
  cudaError_t code = ::emu::g_last_error;
  if (code != cudaSuccess) {  // a launch error: nothing ran (the driver API returns it at once)
    ::emu::g_last_error = ::emu::g_sticky_error;
    std::string what = std::string("CUDA error (CPU emulation): ") + ::emu::error_name(code) + " (the launch)";
    return fail(code, what.c_str(), message, n);
  }
  return 0;
}

template <bool Plain, class... P>
int launch(void (*kernel)(P...), unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
           size_t smem, void** args, char* message, size_t n) {
  return launch_unpacked<Plain>(kernel, std::index_sequence_for<P...>{}, dim3(gx, gy, gz), dim3(bx, by, bz), smem,
                                args, message, n);
}

template <class... P>
int params(void (*)(P...), size_t* sizes, int capacity) {
  size_t all[] = {sizeof(std::decay_t<P>)..., 0};
  for (int i = 0; i < (int)sizeof...(P) && i < capacity; ++i) sizes[i] = all[i];
  return (int)sizeof...(P);
}

}  // namespace emu::lean

// cudaDeviceReset: the sticky error cleared (the emulation's state is one per process, as a context).
// Defined here, not inline: lean.h is read by the one translation unit of a lean library.
extern "C" int agentforge_device_reset() { return (int)cudaDeviceReset(); }

#define AGENTFORGE_LEAN_KERNEL(k, plain)                                                                           \
  extern "C" int agentforge_launch_##k(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,           \
                                       unsigned bz, size_t smem, void** args, char* message, size_t n) {           \
    return ::emu::lean::launch<plain>(&k, gx, gy, gz, bx, by, bz, smem, args, message, n);                         \
  }                                                                                                                \
  extern "C" int agentforge_params_##k(size_t* sizes, int capacity) { return ::emu::lean::params(&k, sizes, capacity); }
