#include "kernels/cuda/gemm/gemm_fp8_dequant.h"

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/fp8.cuh"
#include "kernels/cuda/common/mma_sync.cuh"

namespace llm::cuda {
namespace {

constexpr int kBM = 64, kBN = 64, kBK = 32;
constexpr int kThreads = 128;          // 4 warps, 2 x 2, each 32 x 32 outputs
constexpr int kPitch = kBK + 8;        // smem row pitch in elements (80 bytes: ldmatrix rows stay 16-byte aligned)
static_assert(kBK % 16 == 0 && 128 % kBK == 0, "a step never straddles two 128-column scale groups");

// grid: (ceil(N / 64), ceil(M / 64)); block: 4 warps. Warp w owns output rows
// [(w / 2) * 32, + 32) and columns [(w % 2) * 32, + 32) of the tile: 2 m16 x 4 n8 MMA tiles; per
// MMA tile a thread holds rows lane / 4 and lane / 4 + 8, columns 2 (lane % 4) and + 1.
// Shared memory: xs [64][kPitch] of T (x rows), ws [64][kPitch] of T (W rows, widened).
template <typename T, typename TOut>
__global__ void __launch_bounds__(kThreads)
    GemmFp8DequantKernel(const T* __restrict__ x, const uint8_t* __restrict__ w, Fp8WeightScales sc,
                         const T* __restrict__ bias, TOut* __restrict__ out, int m, int n, int k) {
  __shared__ __align__(16) T xs[kBM * kPitch];
  __shared__ __align__(16) T ws[kBN * kPitch];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int n0 = blockIdx.x * kBN, m0 = blockIdx.y * kBM;
  const int wm = (warp >> 1) * 32, wn = (warp & 1) * 32;
  float acc[2][4][4] = {};
  for (int k0 = 0; k0 < k; k0 += kBK) {
    // x tile: 64 rows x 4 chunks of 8 elements.
    for (int i = tid; i < kBM * (kBK / 8); i += kThreads) {
      const int r = i / (kBK / 8), c = (i % (kBK / 8)) * 8;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (m0 + r < m && k0 + c < k) v = *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(m0 + r) * k + k0 + c);
      *reinterpret_cast<uint4*>(xs + r * kPitch + c) = v;
    }
    // W tile: 64 rows x 4 pieces of 8 E4M3 bytes, widened exactly to T.
    for (int i = tid; i < kBN * (kBK / 8); i += kThreads) {
      const int r = i / (kBK / 8), c = (i % (kBK / 8)) * 8;
      uint2 raw = make_uint2(0, 0);
      if (n0 + r < n && k0 + c < k) raw = *reinterpret_cast<const uint2*>(w + static_cast<int64_t>(n0 + r) * k + k0 + c);
      float f[8];
      Fp8x4ToFloat(raw.x, f);
      Fp8x4ToFloat(raw.y, f + 4);
      Vec16<T> v;
#pragma unroll
      for (int e = 0; e < 8; ++e) v.v[e] = FromFloat<T>(f[e]);
      StoreVec(ws + r * kPitch + c, v);
    }
    __syncthreads();
    float part[2][4][4] = {};
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      const int mi = lane >> 3;
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        LdMatrixX4(a[mt], xs + (wm + mt * 16 + (mi & 1) * 8 + (lane & 7)) * kPitch + kk * 16 + (mi >> 1) * 8);
#pragma unroll
      for (int nt2 = 0; nt2 < 2; ++nt2) {
        uint32_t b[4];
        LdMatrixX4(b, ws + (wn + nt2 * 16 + (mi >> 1) * 8 + (lane & 7)) * kPitch + kk * 16 + (mi & 1) * 8);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          Mma16816<T>::Run(part[mt][2 * nt2], a[mt], b[0], b[1]);
          Mma16816<T>::Run(part[mt][2 * nt2 + 1], a[mt], b[2], b[3]);
        }
      }
    }
    // This step's sums times each column's scale for these 32 columns.
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n0 + wn + nt * 8 + 2 * (lane & 3) + e;
        const float s = col < n ? __ldg(sc.scale + (col / sc.rows_per) * sc.cols + k0 / sc.cols_per) : 0.0f;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          acc[mt][nt][e] += s * part[mt][nt][e];
          acc[mt][nt][2 + e] += s * part[mt][nt][2 + e];
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + wm + mt * 16 + (lane >> 2) + (e >= 2 ? 8 : 0);
        const int col = n0 + wn + nt * 8 + 2 * (lane & 3) + (e & 1);
        if (row < m && col < n)
          out[static_cast<int64_t>(row) * n + col] = FromFloat<TOut>(acc[mt][nt][e] + (bias ? ToFloat(bias[col]) : 0.0f));
      }
    }
  }
}

template <typename T, typename TOut>
absl::Status LaunchTyped(const void* x, const void* w, const Fp8WeightScales& s, const void* bias, void* out, int m,
                         int n, int k, Stream stream) {
  const dim3 grid((n + kBN - 1) / kBN, (m + kBM - 1) / kBM);
  CUDA_RETURN_IF_ERROR(LaunchKernel(GemmFp8DequantKernel<T, TOut>, grid, dim3(kThreads), 0, stream, false,
                                    static_cast<const T*>(x), static_cast<const uint8_t*>(w), s,
                                    static_cast<const T*>(bias), static_cast<TOut*>(out), m, n, k));
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchGemmFp8Dequant(DType dtype, DType out_dtype, const void* x, const void* w,
                                  const Fp8WeightScales& scales, const void* bias, void* out, int64_t m, int64_t n,
                                  int64_t k, Stream stream) {
  if (m < 0 || n <= 0 || k <= 0 || k % 8 != 0 || m > 0x7fffffff || n > 0x7fffffff || k > 0x7fffffff ||
      (m + kBM - 1) / kBM > 65535 || scales.scale == nullptr || scales.rows_per < 1 || scales.cols_per < 1)
    return absl::InvalidArgumentError(absl::StrCat("GemmFp8Dequant: unsupported shape m ", m, " n ", n, " k ", k));
  if (!Aligned16(x) || !Aligned8(w)) return absl::InvalidArgumentError("GemmFp8Dequant: misaligned operands");
  if (m == 0) return absl::OkStatus();
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k);
  if (dtype == DType::kBF16) {
    if (out_dtype == DType::kBF16)
      return LaunchTyped<__nv_bfloat16, __nv_bfloat16>(x, w, scales, bias, out, mi, ni, ki, stream);
    if (out_dtype == DType::kF32) return LaunchTyped<__nv_bfloat16, float>(x, w, scales, bias, out, mi, ni, ki, stream);
  } else if (dtype == DType::kF16) {
    if (out_dtype == DType::kF16) return LaunchTyped<__half, __half>(x, w, scales, bias, out, mi, ni, ki, stream);
    if (out_dtype == DType::kF32) return LaunchTyped<__half, float>(x, w, scales, bias, out, mi, ni, ki, stream);
  }
  return absl::InvalidArgumentError("GemmFp8Dequant: bf16/fp16 inputs, output in the input dtype or float32");
}

}  // namespace llm::cuda
