#include "kernels/cuda/quant/fp8_quantize.h"

#include "kernels/core/fp8_scale.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/fp8.cuh"

namespace llm::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 128;
constexpr int kMaxPieces = 4;  // 16-column pieces a thread keeps: rows of up to 16384 columns read once

// A thread's 16-column piece p of row xr, as floats, in 16-byte loads.
template <typename T>
__device__ __forceinline__ void LoadPiece(const T* xr, int p, float (&v)[16]) {
  constexpr int kVec = Vec16<T>::kVec;
#pragma unroll
  for (int c = 0; c < 16 / kVec; ++c) {
    const Vec16<T> in = LoadVec(xr + p * 16 + c * kVec);
#pragma unroll
    for (int e = 0; e < kVec; ++e) v[c * kVec + e] = ToFloat(in.v[e]);
  }
}

// One block per row. Each thread takes the row's 16-column pieces threadIdx.x, threadIdx.x +
// kThreads, ...: it reads them once into registers (rows of up to kThreads * 16 * kMaxPieces
// columns; longer rows are read again for the second pass), the block reduces the amax, then
// every piece is divided by the scale and stored as 16 E4M3 bytes. A row's read is the kernel's
// latency at decode sizes (a few rows): one pass of 16-byte loads instead of two of 2-byte ones.
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
  constexpr bool kPerToken = kScaling == Fp8ActivationScaling::kPerToken;
  float v[kMaxPieces][16];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxPieces; ++i) {
    const int p = threadIdx.x + i * kThreads;
    if (p < pieces) {
      LoadPiece(xr, p, v[i]);
      if constexpr (kPerToken) {
#pragma unroll
        for (int e = 0; e < 16; ++e) amax = fmaxf(amax, fabsf(v[i][e]));
      }
    }
  }
  if constexpr (kPerToken) {
    for (int p = threadIdx.x + kMaxPieces * kThreads; p < pieces; p += kThreads) {  // a row past the registers
      float w[16];
      LoadPiece(xr, p, w);
      for (int e = 0; e < 16; ++e) amax = fmaxf(amax, fabsf(w[e]));
    }
    amax = BlockMax(amax, scratch);
  }
  const float row_scale = kScaling == Fp8ActivationScaling::kStatic     ? *static_scale
                          : kPerToken                                   ? Fp8ScaleForAmax(amax)
                                                                        : 1.0f;
  if (kPerToken && threadIdx.x == 0) scales[row] = row_scale;
  // Groups: the pieces of a 128-column group are 8 consecutive pieces, i.e. 8 consecutive lanes
  // of one warp when the loop's stride (kThreads) is a multiple of 8.
  static_assert(kThreads % 8 == 0);
  auto store = [&](int p, const float (&w)[16]) {
    float s = row_scale;
    if constexpr (kScaling == Fp8ActivationScaling::kPerGroup) {
      float a = 0.0f;
      if (p < pieces)
        for (int e = 0; e < 16; ++e) a = fmaxf(a, fabsf(w[e]));
      for (int off = 1; off < 8; off <<= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, off));
      s = Fp8ScaleForAmax(a);
      const int g = p / (kGroup / 16);
      if (p < pieces && p % (kGroup / 16) == 0) scales[static_cast<int64_t>(g) * m + row] = s;
    }
    if (p >= pieces) return;
    const Fp8ScaleDivisor divide(s, kScaling != Fp8ActivationScaling::kStatic);
    uint4 out;
    uint8_t* ob = reinterpret_cast<uint8_t*>(&out);
#pragma unroll
    for (int e = 0; e < 16; ++e) ob[e] = FloatToFp8(divide(w[e]));
    *reinterpret_cast<uint4*>(qr + p * 16) = out;
  };
  // Every lane of a warp runs each iteration (the group shuffles need them all).
#pragma unroll
  for (int i = 0; i < kMaxPieces; ++i)
    if (i * kThreads < pieces) store(threadIdx.x + i * kThreads, v[i]);
  for (int base = kMaxPieces * kThreads; base < pieces; base += kThreads) {
    const int p = base + threadIdx.x;
    float w[16];
    if (p < pieces) LoadPiece(xr, p, w);
    store(p, w);
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
      (scaling != Fp8ActivationScaling::kStatic && scales == nullptr) || !Aligned16(x) || !Aligned16(q))
    return absl::InvalidArgumentError(absl::StrCat("QuantizeFp8: unsupported shape m ", m, " k ", k));
  if (m == 0) return absl::OkStatus();
  const int mi = static_cast<int>(m), ki = static_cast<int>(k);
  return LLM_DISPATCH_FLOAT(dtype, "QuantizeFp8", [&] {
    return LaunchTyped<scalar_t>(x, q, scales, mi, ki, scaling, static_scale, stream, pdl);
  });
}

}  // namespace llm::cuda
