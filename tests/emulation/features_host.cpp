#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

#define CHECK_CUDA(x) TORCH_CHECK(x.is_cuda(), #x " must be a CUDA tensor")

torch::Tensor ids(int gx, int gy, int gz, int bx, int by, int bz) {
  auto out = torch::full({gx * gy * gz * bx * by * bz, 4}, -1, torch::dtype(torch::kInt32).device(torch::kCUDA));
  ids3d<<<dim3(gx, gy, gz), dim3(bx, by, bz), 0, at::cuda::getCurrentCUDAStream()>>>(out.data_ptr<int>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
torch::Tensor sum(torch::Tensor x, int threads) {
  CHECK_CUDA(x);
  const c10::cuda::CUDAGuard guard(x.device());
  auto out = torch::zeros({1}, x.options().dtype(torch::kFloat32));
  int n = x.numel(), blocks = (n + threads - 1) / threads;
  if (x.scalar_type() == torch::kHalf)
    block_sum<__half><<<blocks, threads, threads * sizeof(float)>>>(reinterpret_cast<__half*>(x.data_ptr<at::Half>()), out.data_ptr<float>(), n);
  else
    block_sum<float><<<blocks, threads, threads * sizeof(float), c10::cuda::getCurrentCUDAStream().stream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
std::vector<torch::Tensor> warps(torch::Tensor x) {
  auto out = torch::empty({x.numel() * 5}, x.options());
  auto votes = torch::zeros({x.numel() / 32 * 4}, x.options().dtype(torch::kInt32));
  warp_ops<<<1, x.numel()>>>(x.data_ptr<float>(), out.data_ptr<float>(), (unsigned*)votes.data_ptr<int>());
  return {out, votes};
}
torch::Tensor barriers(torch::Tensor x) {
  auto out = torch::zeros({3}, x.options().dtype(torch::kInt32));
  barrier_forms<<<1, x.numel()>>>(x.data_ptr<float>(), out.data_ptr<int>());
  return out;
}
std::vector<torch::Tensor> atomic_ops(int threads, int blocks) {
  auto o = torch::TensorOptions().device(torch::kCUDA);
  auto i = torch::zeros({3}, o.dtype(torch::kInt32));
  auto f = torch::zeros({1}, o.dtype(torch::kFloat32));
  auto d = torch::zeros({1}, o.dtype(torch::kFloat64));
  auto h = torch::zeros({1}, o.dtype(torch::kHalf));
  auto b = torch::zeros({1}, o.dtype(torch::kBFloat16));
  auto m = torch::zeros({2}, o.dtype(torch::kInt32));
  atomics<<<blocks, threads>>>(i.data_ptr<int>(), f.data_ptr<float>(), d.data_ptr<double>(),
      reinterpret_cast<__half*>(h.data_ptr<at::Half>()), reinterpret_cast<__nv_bfloat16*>(b.data_ptr<at::BFloat16>()),
      (unsigned*)m.data_ptr<int>());
  return {i, f, d, h, b, m};
}
torch::Tensor half_ops(torch::Tensor x, torch::Tensor y, torch::Tensor z) {
  auto out = torch::empty({x.numel()}, z.options());
  int n = x.numel();
  halves<<<(n + 63) / 64, 64>>>(reinterpret_cast<const __half*>(x.data_ptr<at::Half>()),
      reinterpret_cast<const __nv_bfloat16*>(y.data_ptr<at::BFloat16>()), reinterpret_cast<const float4*>(z.data_ptr<float>()),
      out.data_ptr<float>(), n);
  return out;
}
torch::Tensor group_ops(torch::Tensor x) {
  auto out = torch::empty({x.numel() * 2}, x.options());
  groups<<<1, x.numel()>>>(x.data_ptr<float>(), out.data_ptr<float>());
  return out;
}
void hang(torch::Tensor x) { half_barrier<<<1, 32>>>(x.data_ptr<float>()); }
void shuffle_exit(torch::Tensor x) { shuffle_after_exit<<<1, 32>>>(x.data_ptr<float>()); }
int launch_error(torch::Tensor x, int gx, int gy, int bx, int smem, bool bounds) {
  if (bounds) bounded<<<gx, bx>>>(x.data_ptr<float>());
  else ids3d<<<dim3(gx, gy), bx, smem>>>((int*)x.data_ptr<float>());
  return (int)cudaGetLastError();
}
int last_error_after() { return (int)cudaGetLastError(); }
void reset_device() { cudaDeviceReset(); }
int sticky_error() { return (int)cudaDeviceSynchronize(); }
// The guard allocator's placement: -1 drawn per allocation (the default), 0 underflow, 1 overflow mode.
void guard_mode(int mode) { emu::guard::api()->forced = mode; }
