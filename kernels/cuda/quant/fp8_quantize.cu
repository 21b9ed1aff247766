#include "kernels/cuda/quant/fp8_quantize.h"

#include "kernels/core/fp8_scale.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/fp8.cuh"

namespace llm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 128;

// One block per row. Each thread holds its 16-column pieces (x is read once when the row fits
// the registers: up to kThreads * 16 * kMaxPieces columns), the block reduces the amax, then
// every piece is divided by the scale and stored as 16 E4M3 bytes.
// Per group: the 8 threads of a 128-column group reduce among themselves (shuffles within the
// warp: groups are 8 consecutive lanes).
template <typename T, Fp8ActivationScaling kScaling>
__global__ void __launch_bounds__(kThreads) QuantizeFp8Kernel(const T* __restrict__ x, uint8_t* __restrict__ q,
                                                              float* __restrict__ scales, int m, int k,
                                                              const float* __restrict__ static_scale) {
  AllowDependentLaunch();
  GridDependencyWait();
  __shared__ float scratch[32];
  const int row = blockIdx.x;
  const T* xr = x + static_cast<int64_t>(row) * k;
  uint8_t* qr = q + static_cast<int64_t>(row) * k;
  const int pieces = k / 16;
  float amax = 0.0f;
  if constexpr (kScaling == Fp8ActivationScaling::kPerToken) {
    for (int p = threadIdx.x; p < pieces; p += kThreads)
      for (int e = 0; e < 16; ++e) amax = fmaxf(amax, fabsf(ToFloat(xr[p * 16 + e])));
    amax = BlockMax(amax, scratch);
  }
  const float row_scale = kScaling == Fp8ActivationScaling::kStatic     ? *static_scale
                          : kScaling == Fp8ActivationScaling::kPerToken ? Fp8ScaleForAmax(amax)
                                                                        : 1.0f;
  if (kScaling == Fp8ActivationScaling::kPerToken && threadIdx.x == 0) scales[row] = row_scale;
  // Groups: the pieces of a 128-column group are 8 consecutive pieces, i.e. 8 consecutive lanes
  // of one warp when the loop's stride (kThreads) is a multiple of 8.
  static_assert(kThreads % 8 == 0);
  for (int base = 0; base < pieces; base += kThreads) {
    const int p = base + threadIdx.x;
    float v[16];
    if (p < pieces)
      for (int e = 0; e < 16; ++e) v[e] = ToFloat(xr[p * 16 + e]);
    float s = row_scale;
    if constexpr (kScaling == Fp8ActivationScaling::kPerGroup) {
      float a = 0.0f;
      if (p < pieces)
        for (int e = 0; e < 16; ++e) a = fmaxf(a, fabsf(v[e]));
      for (int off = 1; off < 8; off <<= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, off));
      s = Fp8ScaleForAmax(a);
      const int g = p / (kGroup / 16);
      if (p < pieces && p % (kGroup / 16) == 0) scales[static_cast<int64_t>(g) * m + row] = s;
    }
    if (p >= pieces) continue;
    uint4 out;
    uint8_t* ob = reinterpret_cast<uint8_t*>(&out);
    for (int e = 0; e < 16; ++e) ob[e] = FloatToFp8(v[e] / s);
    *reinterpret_cast<uint4*>(qr + p * 16) = out;
  }
}

template <typename T>
absl::Status LaunchTyped(const void* x, void* q, float* scales, int m, int k, Fp8ActivationScaling scaling,
                         const float* static_scale, Stream stream, bool pdl) {
  const T* xt = static_cast<const T*>(x);
  uint8_t* qt = static_cast<uint8_t*>(q);
  cudaError_t err;
  switch (scaling) {
    case Fp8ActivationScaling::kPerToken:
      err = LaunchKernel(QuantizeFp8Kernel<T, Fp8ActivationScaling::kPerToken>, dim3(m), dim3(kThreads), 0, stream,
                         pdl, xt, qt, scales, m, k, static_scale);
      break;
    case Fp8ActivationScaling::kPerGroup:
      err = LaunchKernel(QuantizeFp8Kernel<T, Fp8ActivationScaling::kPerGroup>, dim3(m), dim3(kThreads), 0, stream,
                         pdl, xt, qt, scales, m, k, static_scale);
      break;
    case Fp8ActivationScaling::kStatic:
      err = LaunchKernel(QuantizeFp8Kernel<T, Fp8ActivationScaling::kStatic>, dim3(m), dim3(kThreads), 0, stream, pdl,
                         xt, qt, scales, m, k, static_scale);
      break;
  }
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchQuantizeFp8(DType dtype, const void* x, void* q, float* scales, int64_t m, int64_t k,
                               Fp8ActivationScaling scaling, const float* static_scale, Stream stream, bool pdl) {
  if (m < 0 || m > 0x7fffffff || k <= 0 || k % 16 != 0 || k > 0x7fffffff ||
      (scaling == Fp8ActivationScaling::kPerGroup && k % kGroup != 0) ||
      (scaling == Fp8ActivationScaling::kStatic && static_scale == nullptr) ||
      (scaling != Fp8ActivationScaling::kStatic && scales == nullptr))
    return absl::InvalidArgumentError(absl::StrCat("QuantizeFp8: unsupported shape m ", m, " k ", k));
  if (m == 0) return absl::OkStatus();
  const int mi = static_cast<int>(m), ki = static_cast<int>(k);
  return LLM_DISPATCH_FLOAT(dtype, "QuantizeFp8", [&] {
    return LaunchTyped<scalar_t>(x, q, scales, mi, ki, scaling, static_scale, stream, pdl);
  });
}

}  // namespace llm::cuda
