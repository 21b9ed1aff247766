#include "kernels/cuda/gemm/w4a16_dequant.h"

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/gemm/w4a16_common.cuh"

namespace llm::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 8 columns (8b..8b + 7 of a chunk: its code word b, w4a16_common.cuh) and one
// 16-byte store; the four threads of a chunk load its 16 bytes (one transaction for the warp's 8
// chunks), so both the loads and the stores of a warp are contiguous.
template <typename T, bool kZeros>
__global__ void __launch_bounds__(kThreads)
    DequantizeKernel(const uint8_t* __restrict__ codes, const __half* __restrict__ scales,
                     const uint8_t* __restrict__ zeros, const int32_t* __restrict__ chunk_group, int groups,
                     int n, int64_t row0, int rows, int kp, T* __restrict__ out) {
  static_assert(Vec16<T>::kVec == 8, "8 columns a 16-byte store");
  const int pieces = kp / 8;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<int64_t>(rows) * pieces) return;
  const int r = static_cast<int>(i / pieces), piece = static_cast<int>(i % pieces);
  const int c = piece / 4, b = piece % 4;
  const int64_t row = row0 + r;
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(codes + W4ChunkOffset(static_cast<int>(row), c, n, kp / kW4Chunk)));
  const int g = __ldg(chunk_group + c);
  const float s = __half2float(scales[row * groups + g]);
  const uint32_t zp = W4ZeroPair<T>(kZeros ? __ldg(zeros + row * groups + g) : kW4SymmetricZero);
  const uint32_t word = W4Word(v, b);
  Vec16<T> ov;
#pragma unroll
  for (int p = 0; p < 4; ++p) {  // pair p: columns 8b + 2p, 8b + 2p + 1
    const float2 f = W4PairToFloat2(W4ValuePair<T>(word, p, zp), static_cast<T*>(nullptr));
    ov.v[2 * p] = FromFloat<T>(f.x * s);
    ov.v[2 * p + 1] = FromFloat<T>(f.y * s);
  }
  StoreVec(out + static_cast<int64_t>(r) * kp + piece * 8, ov);
}

template <typename T>
absl::Status LaunchTyped(const W4A16Weights& w, int n, int64_t row0, int rows, int kp, void* out, Stream stream) {
  const int64_t threads = static_cast<int64_t>(rows) * (kp / 8);
  const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads));
  const __half* scales = static_cast<const __half*>(w.scales);
  const int groups = static_cast<int>(w.groups);
  cudaError_t err =
      w.zeros ? LaunchKernel(DequantizeKernel<T, true>, grid, dim3(kThreads), 0, stream, false, w.codes, scales,
                             w.zeros, w.chunk_group, groups, n, row0, rows, kp, static_cast<T*>(out))
              : LaunchKernel(DequantizeKernel<T, false>, grid, dim3(kThreads), 0, stream, false, w.codes, scales,
                             w.zeros, w.chunk_group, groups, n, row0, rows, kp, static_cast<T*>(out));
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchW4A16Dequantize(DType dtype, const W4A16Weights& w, int64_t n, int64_t row0, int64_t rows,
                                   int64_t kp, void* out, Stream stream) {
  if (row0 < 0 || rows < 0 || row0 + rows > n || n > 0x7fffffff || kp <= 0 || kp % kW4Chunk != 0 || kp > 0x7fffffff ||
      rows * (kp / kW4Chunk) > (int64_t{1} << 40) || w.codes == nullptr || w.scales == nullptr ||
      w.chunk_group == nullptr || w.groups < 1)
    return absl::InvalidArgumentError(absl::StrCat("W4A16Dequantize: unsupported shape rows ", rows, " kp ", kp));
  if (!Aligned16(out) || !Aligned16(w.codes)) return absl::InvalidArgumentError("W4A16Dequantize: misaligned operands");
  if (rows == 0) return absl::OkStatus();
  const int ri = static_cast<int>(rows), ki = static_cast<int>(kp);
  if (dtype == DType::kBF16) return LaunchTyped<__nv_bfloat16>(w, static_cast<int>(n), row0, ri, ki, out, stream);
  if (dtype == DType::kF16) return LaunchTyped<__half>(w, static_cast<int>(n), row0, ri, ki, out, stream);
  return absl::InvalidArgumentError("W4A16Dequantize: bf16 or fp16 output");
}

}  // namespace llm::cuda
