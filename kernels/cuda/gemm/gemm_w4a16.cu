#include "kernels/cuda/gemm/gemm_w4a16.h"

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/mma_sync.cuh"
#include "kernels/cuda/gemm/w4a16_common.cuh"

namespace llm::cuda {
namespace {

struct W4Args {
  const uint8_t* codes;
  const __half* scales;
  const uint8_t* zeros;
  const int32_t* chunk_group;
  int groups;
};

// A block computes a BM x BN tile of out with WM x WN warps, each a (BM / WM) x (BN / WN) tile of
// MT x NT MMA tiles (m16 x n8). One K step is one 32-column chunk (one group, one scale a row).
// Shared memory, kStages stages of: x [BM][kPitchA] of T (rows padded to 80 bytes, so that the 8
// rows an ldmatrix reads fall in 8 bank groups), codes [BN][16 bytes] (a quad reads one row's 16
// bytes, a warp's 8 rows 128 contiguous bytes: no padding needed).
template <int kBM, int kBN, int kWarpsM, int kWarpsN>
struct TileConfig {
  static constexpr int BM = kBM, BN = kBN, WM = kWarpsM, WN = kWarpsN;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kWarpRows = BM / WM, kWarpCols = BN / WN;
  static constexpr int MT = kWarpRows / 16, NT = kWarpCols / 8;
  static constexpr int kPitchA = kW4Chunk + 8;
  static constexpr int kABytes = BM * kPitchA * 2;
  static constexpr int kBBytes = BN * kW4ChunkBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kStages = 3;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kWarpRows % 16 == 0 && kWarpCols % 8 == 0, "warp tiles are whole MMA tiles");
  static_assert(kStageBytes % 128 == 0, "stages stay 128-byte aligned");
};
using LargeTile = TileConfig<128, 128, 2, 4>;  // 8 warps of 64 x 32: 4 x 4 MMA tiles each
using SmallTile = TileConfig<64, 64, 2, 2>;    // 4 warps of 32 x 32: 2 x 4 MMA tiles each

template <typename T, typename TOut, typename C, bool kZeros>
__global__ void __launch_bounds__(C::kThreads)
    GemmW4A16Kernel(const T* __restrict__ x, W4Args w, const T* __restrict__ bias, TOut* __restrict__ out, int m,
                    int n, int kp) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int g = lane >> 2, t = lane & 3;  // the MMA fragments' group and thread-in-group
  const int n0 = blockIdx.x * C::BN, m0 = blockIdx.y * C::BM;
  const int wm = (warp / C::WN) * C::kWarpRows, wn = (warp % C::WN) * C::kWarpCols;
  const int chunks = kp / kW4Chunk;

  auto a_tile = [&](int s) { return reinterpret_cast<T*>(smem + s * C::kStageBytes); };
  auto b_tile = [&](int s) { return smem + s * C::kStageBytes + C::kABytes; };
  // Chunk c of x's BM rows (4 pieces of 8 elements a row) and of the codes' BN rows (one piece);
  // rows past the ends are zero-filled.
  auto load = [&](int s, int c) {
    T* as = a_tile(s);
    for (int i = tid; i < C::BM * 4; i += C::kThreads) {
      const int r = i >> 2, piece = i & 3;
      const bool valid = m0 + r < m;
      const T* src = x + (valid ? static_cast<int64_t>(m0 + r) * kp + c * kW4Chunk + piece * 8 : 0);
      CpAsync16(as + r * C::kPitchA + piece * 8, src, valid);
    }
    unsigned char* bs = b_tile(s);
    for (int i = tid; i < C::BN; i += C::kThreads) {
      const bool valid = n0 + i < n;
      const uint8_t* src = w.codes + (valid ? W4ChunkOffset(n0 + i, c, n, chunks) : 0);
      CpAsync16(bs + i * kW4ChunkBytes, src, valid);
    }
  };

  float acc[C::MT][C::NT][4];
#pragma unroll
  for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < chunks) load(s, s);
    CpAsyncCommit();
  }
  for (int c = 0; c < chunks; ++c) {
    CpAsyncWait<C::kStages - 2>();  // chunk c has landed
    __syncthreads();                // and every warp is done with chunk c - 1's stage
    {
      const int next = c + C::kStages - 1;
      if (next < chunks) load(next % C::kStages, next);
      CpAsyncCommit();
    }
    const int s = c % C::kStages;
    const T* as = a_tile(s);
    const unsigned char* bs = b_tile(s);
    const int grp = __ldg(w.chunk_group + c);

    // B fragments of both k16 steps of this chunk: columns (16 step + 2t, + 1) and (16 step + 8 +
    // 2t, + 1) of row (wn + nt * 8 + g), pair t of its words 2 step and 2 step + 1, as exact
    // (code - zero) pairs.
    uint32_t b[C::NT][2][2];
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt) {
      const int row = wn + nt * 8 + g;
      const uint4 words = *reinterpret_cast<const uint4*>(bs + row * kW4ChunkBytes);
      int zero = kW4SymmetricZero;
      if (kZeros && n0 + row < n) zero = __ldg(w.zeros + static_cast<int64_t>(n0 + row) * w.groups + grp);
      const uint32_t zp = W4ZeroPair<T>(zero);
#pragma unroll
      for (int step = 0; step < 2; ++step)
#pragma unroll
        for (int reg = 0; reg < 2; ++reg) b[nt][step][reg] = W4ValuePair<T>(W4Word(words, 2 * step + reg), t, zp);
    }

    float part[C::MT][C::NT][4];
#pragma unroll
    for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < C::NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) part[mt][nt][e] = 0.0f;
#pragma unroll
    for (int step = 0; step < 2; ++step) {
      uint32_t a[C::MT][4];
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt)
        LdMatrixX4(a[mt], as + (wm + mt * 16 + (lane & 15)) * C::kPitchA + step * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int mt = 0; mt < C::MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < C::NT; ++nt) Mma16816<T>::Run(part[mt][nt], a[mt], b[nt][step][0], b[nt][step][1]);
    }

    // This chunk's sums times the scales of this lane's output columns (2t and 2t + 1 of each n8 tile).
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int col = n0 + wn + nt * 8 + 2 * t + e;
        const float sc = col < n ? __half2float(w.scales[static_cast<int64_t>(col) * w.groups + grp]) : 0.0f;
#pragma unroll
        for (int mt = 0; mt < C::MT; ++mt) {
          acc[mt][nt][e] += sc * part[mt][nt][e];
          acc[mt][nt][2 + e] += sc * part[mt][nt][2 + e];
        }
      }
    }
  }
  CpAsyncWait<0>();

#pragma unroll
  for (int mt = 0; mt < C::MT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < C::NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = m0 + wm + mt * 16 + g + (e >= 2 ? 8 : 0);
        const int col = n0 + wn + nt * 8 + 2 * t + (e & 1);
        if (row < m && col < n)
          out[static_cast<int64_t>(row) * n + col] = FromFloat<TOut>(acc[mt][nt][e] + (bias ? ToFloat(bias[col]) : 0.0f));
      }
    }
  }
}

template <typename T, typename TOut, typename C, bool kZeros>
absl::Status LaunchTile(const void* x, const W4Args& w, const void* bias, void* out, int m, int n, int kp,
                        Stream stream) {
  auto kernel = GemmW4A16Kernel<T, TOut, C, kZeros>;
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(kernel, C::kSmemBytes));
  const dim3 grid((n + C::BN - 1) / C::BN, (m + C::BM - 1) / C::BM);
  CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, grid, dim3(C::kThreads), C::kSmemBytes, stream, false,
                                    static_cast<const T*>(x), w, static_cast<const T*>(bias), static_cast<TOut*>(out),
                                    m, n, kp));
  return absl::OkStatus();
}

// 128 x 128 tiles where they alone fill the GPU, else 64 x 64 (decode batches, short prefills:
// 128-row tiles of a few rows would leave most SMs idle and the weight stream slow).
template <typename T, typename TOut, bool kZeros>
absl::Status LaunchShape(const void* x, const W4Args& w, const void* bias, void* out, int m, int n, int kp,
                         int num_sms, Stream stream) {
  const int64_t large_blocks =
      int64_t{(n + LargeTile::BN - 1) / LargeTile::BN} * ((m + LargeTile::BM - 1) / LargeTile::BM);
  if (large_blocks >= num_sms) return LaunchTile<T, TOut, LargeTile, kZeros>(x, w, bias, out, m, n, kp, stream);
  return LaunchTile<T, TOut, SmallTile, kZeros>(x, w, bias, out, m, n, kp, stream);
}

template <typename T, typename TOut>
absl::Status LaunchTyped(const void* x, const W4A16Weights& w, const void* bias, void* out, int m, int n, int kp,
                         int num_sms, Stream stream) {
  const W4Args a{w.codes, static_cast<const __half*>(w.scales), w.zeros, w.chunk_group, static_cast<int>(w.groups)};
  if (w.zeros != nullptr) return LaunchShape<T, TOut, true>(x, a, bias, out, m, n, kp, num_sms, stream);
  return LaunchShape<T, TOut, false>(x, a, bias, out, m, n, kp, num_sms, stream);
}

}  // namespace

absl::Status LaunchGemmW4A16(DType dtype, DType out_dtype, const void* x, const W4A16Weights& w, const void* bias,
                             void* out, int64_t m, int64_t n, int64_t kp, int num_sms, Stream stream) {
  if (m < 0 || n <= 0 || kp <= 0 || kp % kW4Chunk != 0 || m > 0x7fffffff || n > 0x7fffffff || kp > 0x7fffffff ||
      (m + 63) / 64 > 65535 || w.codes == nullptr || w.scales == nullptr || w.chunk_group == nullptr || w.groups < 1)
    return absl::InvalidArgumentError(absl::StrCat("GemmW4A16: unsupported shape m ", m, " n ", n, " kp ", kp));
  if (!Aligned16(x) || !Aligned16(w.codes)) return absl::InvalidArgumentError("GemmW4A16: misaligned operands");
  if (m == 0) return absl::OkStatus();
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(kp);
  if (dtype == DType::kBF16) {
    if (out_dtype == DType::kBF16)
      return LaunchTyped<__nv_bfloat16, __nv_bfloat16>(x, w, bias, out, mi, ni, ki, num_sms, stream);
    if (out_dtype == DType::kF32) return LaunchTyped<__nv_bfloat16, float>(x, w, bias, out, mi, ni, ki, num_sms, stream);
  } else if (dtype == DType::kF16) {
    if (out_dtype == DType::kF16) return LaunchTyped<__half, __half>(x, w, bias, out, mi, ni, ki, num_sms, stream);
    if (out_dtype == DType::kF32) return LaunchTyped<__half, float>(x, w, bias, out, mi, ni, ki, num_sms, stream);
  }
  return absl::InvalidArgumentError("GemmW4A16: bf16/fp16 inputs, output in the input dtype or float32");
}

}  // namespace llm::cuda
