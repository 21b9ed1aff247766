#include "kernels/cuda/gemm/w4a16_dequant.h"

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/gemm/w4a16_common.cuh"

namespace llm::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 32-column chunk of a row: one 16-byte load of codes, four 16-byte stores. The
// threads of a warp take consecutive chunks of a row (coalesced both ways).
template <typename T, bool kZeros>
__global__ void __launch_bounds__(kThreads)
    DequantizeKernel(const uint8_t* __restrict__ codes, const __half* __restrict__ scales,
                     const uint8_t* __restrict__ zeros, const int32_t* __restrict__ chunk_group, int groups,
                     int64_t row0, int rows, int kp, T* __restrict__ out) {
  const int kv = kp / kW4Chunk;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * kv) return;
  const int r = static_cast<int>(i / kv), c = static_cast<int>(i % kv);
  const int64_t row = row0 + r;
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(codes + row * (kp / 2)) + c);
  const int g = __ldg(chunk_group + c);
  const float s = __half2float(scales[row * groups + g]);
  const int zero = kZeros ? __ldg(zeros + row * groups + g) : kW4SymmetricZero;
  float wf[kW4Chunk];
  W4DequantChunk<T>(v, W4ZeroPair<T>(zero), wf);
  T* o = out + static_cast<int64_t>(r) * kp + c * kW4Chunk;
#pragma unroll
  for (int q = 0; q < kW4Chunk / Vec16<T>::kVec; ++q) {
    Vec16<T> ov;
#pragma unroll
    for (int e = 0; e < Vec16<T>::kVec; ++e) ov.v[e] = FromFloat<T>(wf[q * Vec16<T>::kVec + e] * s);
    StoreVec(o + q * Vec16<T>::kVec, ov);
  }
}

template <typename T>
absl::Status LaunchTyped(const W4A16Weights& w, int64_t row0, int rows, int kp, void* out, Stream stream) {
  const int64_t threads = static_cast<int64_t>(rows) * (kp / kW4Chunk);
  const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads));
  const __half* scales = static_cast<const __half*>(w.scales);
  const int groups = static_cast<int>(w.groups);
  cudaError_t err =
      w.zeros ? LaunchKernel(DequantizeKernel<T, true>, grid, dim3(kThreads), 0, stream, false, w.codes, scales,
                             w.zeros, w.chunk_group, groups, row0, rows, kp, static_cast<T*>(out))
              : LaunchKernel(DequantizeKernel<T, false>, grid, dim3(kThreads), 0, stream, false, w.codes, scales,
                             w.zeros, w.chunk_group, groups, row0, rows, kp, static_cast<T*>(out));
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchW4A16Dequantize(DType dtype, const W4A16Weights& w, int64_t row0, int64_t rows, int64_t kp,
                                   void* out, Stream stream) {
  if (row0 < 0 || rows < 0 || rows > 0x7fffffff || kp <= 0 || kp % kW4Chunk != 0 || kp > 0x7fffffff ||
      rows * (kp / kW4Chunk) > (int64_t{1} << 40) || w.codes == nullptr || w.scales == nullptr ||
      w.chunk_group == nullptr || w.groups < 1)
    return absl::InvalidArgumentError(absl::StrCat("W4A16Dequantize: unsupported shape rows ", rows, " kp ", kp));
  if (!Aligned16(out) || !Aligned16(w.codes)) return absl::InvalidArgumentError("W4A16Dequantize: misaligned operands");
  if (rows == 0) return absl::OkStatus();
  const int ri = static_cast<int>(rows), ki = static_cast<int>(kp);
  if (dtype == DType::kBF16) return LaunchTyped<__nv_bfloat16>(w, row0, ri, ki, out, stream);
  if (dtype == DType::kF16) return LaunchTyped<__half>(w, row0, ri, ki, out, stream);
  return absl::InvalidArgumentError("W4A16Dequantize: bf16 or fp16 output");
}

}  // namespace llm::cuda
