#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/mma_sync.cuh"
#include "kernels/cuda/gemm/gemv_fp8_w8a8.h"

namespace llm::cuda {
namespace {

constexpr int kWarps = 8;          // warps a block: 8 / split row groups of 8 weight rows
constexpr int kChunkCols = 64;     // columns one warp-wide load covers: 16 bytes a lane, 4 lanes a row
constexpr int kPromoteChunks = 2;  // MMA sums added into float32 totals every 128 columns

struct W8A8Params {
  const uint8_t* x;  // E4M3 [m, k]
  const uint8_t* w;  // E4M3 [n, k]
  const float* x_scale;
  const float* w_scale;
  bool x_per_token, w_per_channel;
  const void* bias;  // [n] of TOut, or null
  void* out;         // [m, n] of TOut
  int m, n, k;
  int split;  // warps sharing a row group's K (1, 2, 4 or 8)
};

// x's codes: every warp of the SM reads the same ones, so through L1.
__device__ __forceinline__ uint4 LoadCodes(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// Token `tok`'s outputs at weight rows col, col + 1 (those < n) from their sums.
template <typename TOut>
__device__ __forceinline__ void StorePair(const W8A8Params& p, int tok, int col, float s0, float s1) {
  const float xs = p.x_scale[p.x_per_token ? tok : 0];
  const bool second = col + 1 < p.n;
  const float ws0 = p.w_scale[p.w_per_channel ? col : 0];
  const float ws1 = p.w_scale[p.w_per_channel && second ? col + 1 : 0];
  float v0 = s0 * xs * ws0, v1 = s1 * xs * ws1;
  if (p.bias != nullptr) {
    const TOut* bias = static_cast<const TOut*>(p.bias);
    v0 += ToFloat(bias[col]);
    if (second) v1 += ToFloat(bias[col + 1]);
  }
  TOut* o = static_cast<TOut*>(p.out) + static_cast<int64_t>(tok) * p.n + col;
  if (second && p.n % 2 == 0) {  // col is even: a 4-byte aligned pair
    if constexpr (std::is_same_v<TOut, __nv_bfloat16>) {
      *reinterpret_cast<__nv_bfloat162*>(o) = __floats2bfloat162_rn(v0, v1);
    } else {
      *reinterpret_cast<__half2*>(o) = __floats2half2_rn(v0, v1);
    }
    return;
  }
  o[0] = FromFloat<TOut>(v0);
  if (second) o[1] = FromFloat<TOut>(v1);
}

// grid: ceil(ceil(n / 8) * split / kWarps) blocks of kWarps warps. Warp w of block b takes row
// group b * (kWarps / split) + w / split (weight rows 8 of them) and part w % split of its 64-column
// chunks; lane (g, t) loads row g's bytes 16t..16t+15 of each chunk (the B operand of the chunk's
// two MMAs: .x/.y, then .z/.w) and, for tokens g and g + 8, the same bytes of x (A). kUnroll chunks
// of W are in flight a lane ahead of the ones being multiplied. The split's sums are added in part
// order through shared memory (deterministic); lane (g, t) then holds tokens g, g + 8 at weight
// rows 2t, 2t + 1 of its group.
template <typename TOut, bool kTwoTokenTiles, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32, 2) GemvFp8W8A8Kernel(W8A8Params p) {
  static_assert(kUnroll % kPromoteChunks == 0, "promotion at batch boundaries");
  __shared__ float partial[kWarps][4][32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int groups_per_block = kWarps / p.split;
  const int group = blockIdx.x * groups_per_block + warp / p.split, part = warp % p.split;
  const int n0 = group * 8;
  const bool active = n0 < p.n;
  const int row = min(n0 + g, p.n - 1);  // rows past n load row n - 1; their sums are never stored
  const int chunks = p.k / kChunkCols;
  const int len = (chunks + p.split - 1) / p.split;
  const int begin = min(chunks, part * len), end = min(chunks, begin + len);
  const uint8_t* wr = p.w + static_cast<int64_t>(row) * p.k + 16 * t;
  const bool tok0 = g < p.m, tok1 = kTwoTokenTiles && g + 8 < p.m;
  const uint8_t* x0 = p.x + static_cast<int64_t>(tok0 ? g : 0) * p.k + 16 * t;
  const uint8_t* x1 = p.x + static_cast<int64_t>(tok1 ? g + 8 : 0) * p.k + 16 * t;

  uint4 cur[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int idx = begin + u;
    cur[u] = active && idx < end ? LoadU4Streaming(wr + static_cast<int64_t>(idx) * kChunkCols)
                                 : make_uint4(0, 0, 0, 0);
  }
  GridDependencyWait();

  float total[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int base = begin; base < end; base += kUnroll) {
    uint4 nxt[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + kUnroll + u;
      nxt[u] = active && idx < end ? LoadU4Streaming(wr + static_cast<int64_t>(idx) * kChunkCols)
                                   : make_uint4(0, 0, 0, 0);
    }
    uint4 xa[kUnroll], xb[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int idx = base + u;
      const bool in = idx < end;
      xa[u] = in && tok0 ? LoadCodes(x0 + idx * kChunkCols) : make_uint4(0, 0, 0, 0);
      xb[u] = in && tok1 ? LoadCodes(x1 + idx * kChunkCols) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u0 = 0; u0 < kUnroll; u0 += kPromoteChunks) {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int u = u0; u < u0 + kPromoteChunks; ++u) {
        // Chunks past `end` hold zeros in both operands: their MMAs add nothing.
        MmaE4m3x32(acc, xa[u].x, xb[u].x, xa[u].y, xb[u].y, cur[u].x, cur[u].y);
        MmaE4m3x32(acc, xa[u].z, xb[u].z, xa[u].w, xb[u].w, cur[u].z, cur[u].w);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) total[i] += acc[i];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) cur[u] = nxt[u];
  }
  AllowDependentLaunch();

  if (p.split > 1) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][i][lane] = total[i];
    __syncthreads();
    if (part != 0) return;
    for (int q = 1; q < p.split; ++q) {
#pragma unroll
      for (int i = 0; i < 4; ++i) total[i] += partial[warp + q][i][lane];
    }
  }
  if (!active || n0 + 2 * t >= p.n) return;
  if (tok0) StorePair<TOut>(p, g, n0 + 2 * t, total[0], total[1]);
  if (tok1) StorePair<TOut>(p, g + 8, n0 + 2 * t, total[2], total[3]);
}

// Warps sharing a row group's K: the most (up to kWarps) that keep the grid within one wave of two
// blocks an SM and every warp at least two batches of chunks, so that small weights still have
// enough loads in flight and large ones take no split sums.
int SplitFor(int64_t n, int64_t k, int num_sms) {
  const int64_t groups = (n + 7) / 8, chunks = k / kChunkCols;
  int split = 1;
  while (split < kWarps && num_sms > 0 && groups * split * 2 <= int64_t{2} * kWarps * num_sms &&
         chunks / (split * 2) >= 16)
    split *= 2;
  return split;
}

template <typename TOut>
cudaError_t Launch(const W8A8Params& p, bool pdl, cudaStream_t stream) {
  const int64_t groups = (p.n + 7) / 8;
  const dim3 grid(static_cast<unsigned>((groups * p.split + kWarps - 1) / kWarps));
  if (p.m > 8)
    return LaunchKernel(GemvFp8W8A8Kernel<TOut, true, 4>, grid, dim3(kWarps * 32), 0, stream, pdl, p);
  return LaunchKernel(GemvFp8W8A8Kernel<TOut, false, 8>, grid, dim3(kWarps * 32), 0, stream, pdl, p);
}

}  // namespace

bool GemvFp8W8A8Supports(const Fp8GemmArgs& a) {
  return a.m >= 1 && a.m <= kGemvFp8W8A8MaxRows && a.n >= 1 && a.n < (int64_t{1} << 30) &&
         a.k >= kChunkCols && a.k % kChunkCols == 0 && a.k < (int64_t{1} << 30) &&
         (a.out_dtype == DType::kBF16 || a.out_dtype == DType::kF16) && ScaleModeIsTensorOrRow(a.w_mode) &&
         ScaleModeIsTensorOrRow(a.x_mode) && a.w_scale != nullptr && a.x_scale != nullptr && Aligned16(a.x) &&
         Aligned16(a.w) && a.out != nullptr;
}

absl::Status LaunchGemvFp8W8A8(const Fp8GemmArgs& a, const GemvFp8W8A8Options& options, Stream stream) {
  if (!GemvFp8W8A8Supports(a))
    return absl::InvalidArgumentError(absl::StrCat("GemvFp8W8A8: unsupported call m ", a.m, " n ", a.n, " k ",
                                                   a.k, " out ", std::string(DTypeName(a.out_dtype))));
  W8A8Params p;
  p.x = static_cast<const uint8_t*>(a.x);
  p.w = static_cast<const uint8_t*>(a.w);
  p.x_scale = a.x_scale;
  p.w_scale = a.w_scale;
  p.x_per_token = a.x_mode == Fp8ScaleMode::kOuterVector;
  p.w_per_channel = a.w_mode == Fp8ScaleMode::kOuterVector;
  p.bias = a.bias;
  p.out = a.out;
  p.m = static_cast<int>(a.m);
  p.n = static_cast<int>(a.n);
  p.k = static_cast<int>(a.k);
  p.split = SplitFor(a.n, a.k, options.num_sms);
  CUDA_RETURN_IF_ERROR(a.out_dtype == DType::kBF16 ? Launch<__nv_bfloat16>(p, options.pdl, stream)
                                                   : Launch<__half>(p, options.pdl, stream));
  return absl::OkStatus();
}

}  // namespace llm::cuda
