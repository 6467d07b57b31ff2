// torch's CUDA-side helpers as the CPU emulation provides them: the current stream (which orders
// nothing), device guards (one device), the launch checks of c10 (cudaGetLastError underneath).
#pragma once
#include "agentforge_emu/runtime.h"
#include <c10/core/Device.h>
#include <c10/util/Exception.h>
#include <c10/util/Optional.h>

namespace c10 { namespace cuda {
struct CUDAStream {
  cudaStream_t stream() const { return nullptr; }
  operator cudaStream_t() const { return nullptr; }
  c10::DeviceIndex device_index() const { return 0; }
  c10::Device device() const { return c10::Device(c10::kCPU); }
  int64_t id() const { return 0; }
  void synchronize() const {}
  bool query() const { return true; }
};
inline CUDAStream getCurrentCUDAStream(c10::DeviceIndex = -1) { return CUDAStream{}; }
inline CUDAStream getDefaultCUDAStream(c10::DeviceIndex = -1) { return CUDAStream{}; }
inline CUDAStream getStreamFromPool(bool = false, c10::DeviceIndex = -1) { return CUDAStream{}; }
inline void setCurrentCUDAStream(CUDAStream) {}
inline c10::DeviceIndex current_device() { return 0; }
inline c10::DeviceIndex device_count() { return 1; }
inline void device_synchronize() {}
struct CUDAGuard {
  explicit CUDAGuard(c10::Device) {}
  explicit CUDAGuard(c10::DeviceIndex) {}
  void set_device(c10::Device) {}
  void set_index(c10::DeviceIndex) {}
};
struct OptionalCUDAGuard {
  OptionalCUDAGuard() = default;
  explicit OptionalCUDAGuard(c10::Device) {}
  explicit OptionalCUDAGuard(std::optional<c10::Device>) {}
  explicit OptionalCUDAGuard(c10::DeviceIndex) {}
  void set_device(c10::Device) {}
  void set_index(c10::DeviceIndex) {}
  void reset() {}
};
struct CUDAStreamGuard { explicit CUDAStreamGuard(CUDAStream) {} };
inline const char* get_cuda_check_suffix() { return " (CPU emulation)"; }
}}  // namespace c10::cuda

namespace at { namespace cuda {
using c10::cuda::CUDAStream;
using c10::cuda::getCurrentCUDAStream;
using c10::cuda::getDefaultCUDAStream;
using c10::cuda::getStreamFromPool;
using c10::cuda::setCurrentCUDAStream;
using c10::cuda::CUDAGuard;
using c10::cuda::OptionalCUDAGuard;
using c10::cuda::CUDAStreamGuard;
inline cudaDeviceProp* getCurrentDeviceProperties() { static cudaDeviceProp p; return &p; }
inline cudaDeviceProp* getDeviceProperties(int64_t) { return getCurrentDeviceProperties(); }
inline int warp_size() { return 32; }
inline int64_t current_device() { return 0; }
}}  // namespace at::cuda

#define C10_CUDA_CHECK(EXPR) do { cudaError_t afemu_e = (EXPR); \
  TORCH_CHECK(afemu_e == cudaSuccess, "CUDA error: ", cudaGetErrorString(afemu_e), " (CPU emulation)"); } while (0)
#define C10_CUDA_CHECK_WARN(EXPR) (void)(EXPR)
#define AT_CUDA_CHECK(EXPR) C10_CUDA_CHECK(EXPR)
#define C10_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())
#define TORCH_CUDA_KERNEL_LAUNCH_CHECK() C10_CUDA_KERNEL_LAUNCH_CHECK()
