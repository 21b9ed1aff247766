#include "kernels/cuda/gemm/gemm_few_rows.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/fp8.cuh"
#include "kernels/cuda/common/mma_sync.cuh"

namespace llm::cuda {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kMinStepCols = 128;
constexpr int kMaxTileRows = 256;
constexpr int kSmemBudget = 220 << 10;  // of the 227 KB a block may have

// A block's tile: kTileRows weight rows (kWarps warps of one or two m16 tiles) by 8 x kTokenTiles
// tokens (n8 tiles, all of x's rows). A stage holds kStepCols columns of the tile's W and of x.
// Each row of a stage is one bulk copy of its kStepCols columns, stored with a pitch that keeps
// the fragment loads conflict-free: 16-bit rows padded by 64 bytes (pitch / 16 = 4 mod 8: the two
// rows of a quarter warp's 16-byte loads land 4 bank groups apart), E4M3 rows by 32 (pitch / 8 =
// 4 mod 16: the four rows of a half warp's 8-byte loads land in 4 different 32-byte groups).
template <int kTileRows, int kTokenTiles, int kStepCols, int kWeightBytes>
struct FewRowsTile {
  static constexpr int kXRowBytes = kStepCols * 2;  // bytes a bulk copy of x's row
  static constexpr int kRowBytes = kXRowBytes + 64;  // x's pitch
  static constexpr int kWCopyBytes = kStepCols * kWeightBytes;  // W: 16-bit or E4M3 weights
  static constexpr int kWRowBytes = kWCopyBytes + (kWeightBytes == 2 ? 64 : 32);
  static constexpr int kRowsPerWarp = kTileRows / kWarps;
  static constexpr int kWarpTiles = kRowsPerWarp / 16;
  static constexpr int kTokens = 8 * kTokenTiles;
  static constexpr int kWBytes = kTileRows * kWRowBytes;
  static constexpr int kStageBytes = kWBytes + kTokens * kRowBytes;
  static constexpr int kStages = kSmemBudget / kStageBytes > 8 ? 8 : kSmemBudget / kStageBytes;
  static_assert(kStages >= 2, "two stages fit");
  static constexpr int kBarOffset = kStages * kStageBytes;  // a full barrier a stage
  static constexpr int kFlagOffset = kBarOffset + kStages * 8;
  static constexpr int kSmemBytes = kFlagOffset + 16;
  // Stages fill the budget, so a block has its SM to itself (an H100 SM has 228 KB): the grid is
  // one block an SM, and the workspace holds that many blocks' slots.
  static_assert(kSmemBytes > (114 << 10), "one block an SM");
  // A straddling tile's float32 sums, in fragment order: [warp][m16 tile][n8 tile][lane][4].
  static constexpr int kSlotFloats = kTileRows * kTokens;
  static_assert(kRowsPerWarp % 16 == 0 && kRowsPerWarp <= 32, "whole m16 tiles, a row copy a lane");
  static_assert(kStepCols % 32 == 0 && kStageBytes % 16 == 0, "whole 32-column blocks, aligned stages");
};

// Per-row weight scales of E4M3 weights (scale[row / rows_per]); 16-bit weights have none.
struct RowScales {
  const float* scale = nullptr;
  int rows_per = 1;
};

// Two E4M3 bytes (the lower in the low half) as the T pair of an MMA operand, exactly.
template <typename T>
__device__ __forceinline__ uint32_t Fp8PairAs(uint32_t two_bytes);
template <>
__device__ __forceinline__ uint32_t Fp8PairAs<__half>(uint32_t two_bytes) {
  return Fp8x2ToHalf2Bits(two_bytes);
}
template <>
__device__ __forceinline__ uint32_t Fp8PairAs<__nv_bfloat16>(uint32_t two_bytes) {
  const uint32_t h = Fp8x2ToHalf2Bits(two_bytes);
  const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(*reinterpret_cast<const __half2*>(&h)));
  return *reinterpret_cast<const uint32_t*>(&b);
}

size_t CountersBytes(int num_sms) { return (static_cast<size_t>(num_sms) * sizeof(unsigned) + 255) / 256 * 256; }

// The iterations (tile, step) of the whole GEMM, cut into gridDim.x equal ranges.
__device__ __forceinline__ int RangeBegin(int block, int total, int blocks) {
  return static_cast<int>(static_cast<int64_t>(block) * total / blocks);
}
__device__ __forceinline__ int BlockOfIteration(int it, int total, int blocks) {
  int b = static_cast<int>(static_cast<int64_t>(it) * blocks / total);
  while (b + 1 < blocks && RangeBegin(b + 1, total, blocks) <= it) ++b;
  while (b > 0 && RangeBegin(b, total, blocks) > it) --b;
  return b;
}

// K order inside a 32-column block: lane t holds physical columns 8t..8t+7 (one 16-byte load of
// W's rows g and g + 8 and of x's token row g); the first k16 MMA takes columns 8t..8t+3 as its
// logical k {2t, 2t+1, 2t+8, 2t+9}, the second 8t+4..8t+7. A and B use the same order, so the
// dot products are those of the true order, and no ldmatrix or shuffle is needed.
// E4M3 weights (TW = uint8_t): the same order, a lane reading 8 weight bytes of each row and
// widening them in registers (exact), each row's scale applied to its sums.
template <typename T, typename TW, int kTileRows, int kTokenTiles, int kStepCols>
__global__ void __launch_bounds__(kThreads)
    GemmFewRowsKernel(const T* __restrict__ x, const TW* __restrict__ w, RowScales scales, const T* __restrict__ bias,
                      T* __restrict__ out, int m, int n, int k, float* __restrict__ slots,
                      unsigned* __restrict__ counters) {
  constexpr bool kFp8 = sizeof(TW) == 1;
  using C = FewRowsTile<kTileRows, kTokenTiles, kStepCols, sizeof(TW)>;
  constexpr int kStages = C::kStages, kRowBytes = C::kRowBytes;
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int steps = k / kStepCols;
  const int tiles = (n + kTileRows - 1) / kTileRows;
  const int total = tiles * steps, blocks = gridDim.x;
  const int begin = RangeBegin(blockIdx.x, total, blocks), end = RangeBegin(blockIdx.x + 1, total, blocks);

  auto w_stage = [&](int s) { return smem + s * C::kStageBytes; };
  auto x_stage = [&](int s) { return smem + s * C::kStageBytes + C::kWBytes; };
  // Stage s fills when every warp has arrived on full[s] announcing its bytes and the copies
  // have landed: warp w copies its own W rows (a row a lane) and x's rows w, w + 8, ... W rows past
  // n and x rows past m are not copied: their stale bytes reach only outputs that are not written
  // (an output element is the dot product of its own weight row and token).
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOffset);
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) MbarrierInit(&full[s], kWarps);
    FenceMbarrierInit();
  }
  __syncthreads();
  const int x_rows_mine = m > warp ? (m - warp + kWarps - 1) / kWarps : 0;
  auto w_rows_in = [&](int tile) { return min(C::kRowsPerWarp, max(0, n - tile * kTileRows - warp * C::kRowsPerWarp)); };
  // Lane 0 announces the warp's bytes of the stage (W rows of `tile`, and x's rows), then the
  // lanes copy the W rows.
  auto load_w = [&](int s, int tile, int step) {
    const int rows = w_rows_in(tile);
    if (lane == 0)
      MbarrierArriveExpectTx(&full[s], rows * C::kWCopyBytes + x_rows_mine * C::kXRowBytes);
    __syncwarp();
    if (lane < rows) {
      const int r = warp * C::kRowsPerWarp + lane;
      BulkCopyToShared(w_stage(s) + r * C::kWRowBytes,
                       w + static_cast<int64_t>(tile * kTileRows + r) * k + step * kStepCols, C::kWCopyBytes,
                       &full[s]);
    }
  };
  auto load_x = [&](int s, int step) {
    if (lane < x_rows_mine) {
      const int r = warp + lane * kWarps;
      BulkCopyToShared(x_stage(s) + r * kRowBytes, x + static_cast<int64_t>(r) * k + step * kStepCols, C::kXRowBytes,
                       &full[s]);
    }
  };

  // Prologue: W's first stages before the dependency wait (W is no predecessor's output), x's after.
  int load_tile = begin / steps, load_step = begin % steps;
  const int first_tile = load_tile, first_step = load_step;
  for (int s = 0; s < kStages - 1; ++s) {
    if (begin + s < end) load_w(s, load_tile, load_step);
    if (++load_step == steps) load_step = 0, ++load_tile;
  }
  GridDependencyWait();
  {
    int step = first_step;
    for (int s = 0; s < kStages - 1; ++s) {
      if (begin + s < end) load_x(s, step);
      if (++step == steps) step = 0;
    }
  }

  float acc[C::kWarpTiles][kTokenTiles][4];
  auto zero = [&] {
#pragma unroll
    for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  };
  zero();
  const int warp_row0 = warp * C::kRowsPerWarp;
  // Fragment (i, j) element e: weight row warp_row0 + 16 i + g (+ 8 for e >= 2), token 8 j + 2 t + (e & 1).
  auto store = [&](int tile, int i, int j, const float v[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = tile * kTileRows + warp_row0 + i * 16 + g + (e >= 2 ? 8 : 0);
      const int token = j * 8 + 2 * t + (e & 1);
      if (row < n && token < m) {
        const float scaled = kFp8 ? v[e] * __ldg(scales.scale + row / scales.rows_per) : v[e];
        out[static_cast<int64_t>(token) * n + row] = FromFloat<T>(scaled + (bias ? ToFloat(bias[row]) : 0.0f));
      }
    }
  };
  unsigned* last_flag = reinterpret_cast<unsigned*>(smem + C::kFlagOffset);
  // The tile's sums over steps [from, to) are done: write them, or, for a straddling tile, keep them.
  auto finish = [&](int tile, int from, int to) {
    if (from == 0 && to == steps) {
#pragma unroll
      for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
        for (int j = 0; j < kTokenTiles; ++j) store(tile, i, j, acc[i][j]);
      return;
    }
    // A straddling tile: every contributor stores its sums in a slot of its own; the last to
    // arrive adds them in block order (so the result does not depend on arrival order: graph
    // replays and eager runs agree bit for bit) and writes the tile. A block has two slots: its
    // range's first segment (if it starts inside a tile) and its last (if it ends inside one, as
    // the tile's first contributor does). The counter is the first contributor's.
    const int first = BlockOfIteration(tile * steps, total, blocks);
    const int last = BlockOfIteration(tile * steps + steps - 1, total, blocks);
    const int frag = warp * (C::kWarpTiles * kTokenTiles * 128) + lane * 4;
    auto slot_of = [&](int b) { return slots + static_cast<int64_t>(2 * b + (b == first ? 1 : 0)) * C::kSlotFloats + frag; };
    float* mine = slot_of(blockIdx.x);
#pragma unroll
    for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j)
        __stcg(reinterpret_cast<float4*>(mine + (i * kTokenTiles + j) * 128),
               make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]));
    __threadfence();
    __syncthreads();
    if (tid == 0) *last_flag = atomicAdd(&counters[first], 1u) == static_cast<unsigned>(last - first);
    __syncthreads();
    if (*last_flag) {  // every contributor's sums are stored
      __threadfence();
#pragma unroll
      for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
        for (int j = 0; j < kTokenTiles; ++j) {
          float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          for (int b = first; b <= last; ++b) {
            const float4 p = __ldcg(reinterpret_cast<const float4*>(slot_of(b) + (i * kTokenTiles + j) * 128));
            v[0] += p.x, v[1] += p.y, v[2] += p.z, v[3] += p.w;
          }
          store(tile, i, j, v);
        }
      if (tid == 0) counters[first] = 0;
    }
  };

  int tile = first_tile, step = first_step, seg_from = first_step;
  for (int it = begin; it < end; ++it) {
    const int local = it - begin;
    __syncthreads();  // the stage refilled below was read by every warp in the previous iteration
    if (it + kStages - 1 < end) {
      const int s = (local + kStages - 1) % kStages;
      FenceProxyAsyncShared();  // those reads before the copies that overwrite the stage
      load_w(s, load_tile, load_step);
      load_x(s, load_step);
      if (++load_step == steps) load_step = 0, ++load_tile;
    }
    MbarrierWait(&full[local % kStages], (local / kStages) & 1);

    const unsigned char* ws = w_stage(local % kStages);
    const unsigned char* xs = x_stage(local % kStages);
#pragma unroll
    for (int h = 0; h < kStepCols / 32; ++h) {
      const int chunk = (4 * h + t) * 16;
      // a[i][s]: the A fragment of m16 tile i for the block's k16 step s.
      uint32_t a[C::kWarpTiles][2][4];
#pragma unroll
      for (int i = 0; i < C::kWarpTiles; ++i) {
        const int r = warp_row0 + i * 16 + g;
        if constexpr (kFp8) {
          const int at = 32 * h + 8 * t;
          const uint2 lo = *reinterpret_cast<const uint2*>(ws + r * C::kWRowBytes + at);
          const uint2 hi = *reinterpret_cast<const uint2*>(ws + (r + 8) * C::kWRowBytes + at);
#pragma unroll
          for (int s2 = 0; s2 < 2; ++s2) {
            const uint32_t wl = s2 ? lo.y : lo.x, wh = s2 ? hi.y : hi.x;
            a[i][s2][0] = Fp8PairAs<T>(wl);
            a[i][s2][1] = Fp8PairAs<T>(wh);
            a[i][s2][2] = Fp8PairAs<T>(wl >> 16);
            a[i][s2][3] = Fp8PairAs<T>(wh >> 16);
          }
        } else {
          const uint4 lo = *reinterpret_cast<const uint4*>(ws + r * C::kWRowBytes + chunk);
          const uint4 hi = *reinterpret_cast<const uint4*>(ws + (r + 8) * C::kWRowBytes + chunk);
          a[i][0][0] = lo.x, a[i][0][1] = hi.x, a[i][0][2] = lo.y, a[i][0][3] = hi.y;
          a[i][1][0] = lo.z, a[i][1][1] = hi.z, a[i][1][2] = lo.w, a[i][1][3] = hi.w;
        }
      }
      uint4 b[kTokenTiles];
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j) b[j] = *reinterpret_cast<const uint4*>(xs + (j * 8 + g) * kRowBytes + chunk);
      // The block's two k16 steps one after the other over all tiles: an accumulator's two MMAs
      // are kTokenTiles x kWarpTiles MMAs apart, not back to back.
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j)
#pragma unroll
        for (int i = 0; i < C::kWarpTiles; ++i) Mma16816<T>::Run(acc[i][j], a[i][0], b[j].x, b[j].y);
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j)
#pragma unroll
        for (int i = 0; i < C::kWarpTiles; ++i) Mma16816<T>::Run(acc[i][j], a[i][1], b[j].z, b[j].w);
    }

    if (step == steps - 1 || it == end - 1) {
      finish(tile, seg_from, step + 1);
      zero();
      seg_from = 0;
    }
    if (++step == steps) step = 0, ++tile;
  }
  AllowDependentLaunch();
}

struct FewRowsArgs {
  const void* x;
  const void* w;
  RowScales scales;
  const void* bias;
  void* out;
  int m, n, k, num_sms;
  GemmFewRowsWorkspace ws;
  bool pdl;
  Stream stream;
};

template <typename T, typename TW, int kTileRows, int kTokenTiles, int kStepCols>
absl::Status LaunchTyped(const FewRowsArgs& a) {
  using C = FewRowsTile<kTileRows, kTokenTiles, kStepCols, sizeof(TW)>;
  auto kernel = GemmFewRowsKernel<T, TW, kTileRows, kTokenTiles, kStepCols>;
  const int n = a.n, k = a.k;
  const GemmFewRowsWorkspace& ws = a.ws;
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(kernel, C::kSmemBytes));
  const int total = (n + kTileRows - 1) / kTileRows * (k / kStepCols);
  const int blocks = std::min(total, a.num_sms);
  // Counters first, at a place no form's slots reach: they must be zero at every call's start.
  unsigned* counters = static_cast<unsigned*>(ws.data);
  float* slots = reinterpret_cast<float*>(static_cast<char*>(ws.data) + CountersBytes(a.num_sms));
  if (CountersBytes(a.num_sms) + 2 * static_cast<size_t>(blocks) * C::kSlotFloats * sizeof(float) > ws.bytes)
    return absl::InternalError("GemmFewRows: workspace too small");
  CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, dim3(blocks), dim3(kThreads), C::kSmemBytes, a.stream, a.pdl,
                                    static_cast<const T*>(a.x), static_cast<const TW*>(a.w), a.scales,
                                    static_cast<const T*>(a.bias), static_cast<T*>(a.out), a.m, n, k, slots,
                                    counters));
  return absl::OkStatus();
}

template <typename T, typename TW, int kTileRows, int kStepCols>
absl::Status LaunchRows(const FewRowsArgs& a) {
  if (a.m <= 8) return LaunchTyped<T, TW, kTileRows, 1, kStepCols>(a);
  if (a.m <= 16) return LaunchTyped<T, TW, kTileRows, 2, kStepCols>(a);
  if (a.m <= 32) return LaunchTyped<T, TW, kTileRows, 4, kStepCols>(a);
  return LaunchTyped<T, TW, kTileRows, 8, kStepCols>(a);
}

// The forms: 16-bit weights in 128 x 128, 128 x 256 and 256 x 128 tiles (rows x columns a stage);
// E4M3 weights in 128 x 128, 128 x 256 and 256 x 256.
template <typename T, typename TW>
absl::Status LaunchConfig(int tile_rows, int step_cols, const FewRowsArgs& a) {
  if (tile_rows == 128 && step_cols == 128) return LaunchRows<T, TW, 128, 128>(a);
  if (tile_rows == 128 && step_cols == 256) return LaunchRows<T, TW, 128, 256>(a);
  if constexpr (sizeof(TW) == 2) {
    if (tile_rows == 256 && step_cols == 128) return LaunchRows<T, TW, 256, 128>(a);
  } else {
    if (tile_rows == 256 && step_cols == 256) return LaunchRows<T, TW, 256, 256>(a);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("GemmFewRows: no form with ", tile_rows, "-row tiles and ", step_cols, "-column steps"));
}

}  // namespace

size_t GemmFewRowsWorkspaceBytes(int num_sms) {
  return CountersBytes(num_sms) + 2 * static_cast<size_t>(num_sms) * kMaxTileRows * kGemmFewRowsMaxRows * sizeof(float);
}

bool GemmFewRowsSupports(DType dtype, DType out_dtype, int64_t m, int64_t n, int64_t k) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && out_dtype == dtype && m >= 1 &&
         m <= kGemmFewRowsMaxRows && n >= 1 && k >= kMinStepCols && k % kMinStepCols == 0 &&
         (n + 127) / 128 * (k / kMinStepCols) < (int64_t{1} << 30);
}

absl::Status LaunchGemmFewRows(DType dtype, const void* x, const GemmFewRowsWeights& w, const void* bias, void* out,
                               int64_t m, int64_t n, int64_t k, int num_sms, const GemmFewRowsWorkspace& workspace,
                               const GemmFewRowsOptions& options, Stream stream) {
  if (!GemmFewRowsSupports(dtype, dtype, m, n, k))
    return absl::InvalidArgumentError(absl::StrCat("GemmFewRows: unsupported call m ", m, " n ", n, " k ", k, " ",
                                                   std::string(DTypeName(dtype))));
  if (!Aligned16(x) || !Aligned16(w.data) || !Aligned16(out) || num_sms < 1)
    return absl::InvalidArgumentError("GemmFewRows: misaligned operands");
  if (w.fp8 && (w.scale == nullptr || w.scale_rows_per < 1))
    return absl::InvalidArgumentError("GemmFewRows: E4M3 weights need their row scales");
  if (workspace.data == nullptr || workspace.bytes < GemmFewRowsWorkspaceBytes(num_sms))
    return absl::InvalidArgumentError("GemmFewRows: no workspace");
  // 128-row tiles split narrow W (N = 4096) into more tiles, so fewer of them straddle blocks;
  // 256-column steps read 512-byte runs of each 16-bit weight row (64-column steps, 128-byte runs,
  // streamed at 10% less). Measured on an H100 (benchmarks/RESULTS.md).
  const int tile_rows = options.tile_rows != 0 ? options.tile_rows : 128;
  int step_cols = options.step_cols != 0 ? options.step_cols : 256;
  int rows = tile_rows;
  if (!w.fp8 && rows == 256) step_cols = std::min(step_cols, 128);  // 256 x 256 x 2 bytes: no room for 2 stages
  if (w.fp8 && rows == 256 && k % 256 != 0) rows = 128;              // E4M3 256-row tiles take 256-column steps
  if (w.fp8 && rows == 256) step_cols = 256;
  while (step_cols > kMinStepCols && k % step_cols != 0) step_cols /= 2;
  FewRowsArgs a{x,
                w.data,
                RowScales{w.scale, static_cast<int>(std::min<int64_t>(w.scale_rows_per, n))},
                bias,
                out,
                static_cast<int>(m),
                static_cast<int>(n),
                static_cast<int>(k),
                num_sms,
                workspace,
                options.pdl,
                stream};
  if (dtype == DType::kBF16) {
    if (w.fp8) return LaunchConfig<__nv_bfloat16, uint8_t>(rows, step_cols, a);
    return LaunchConfig<__nv_bfloat16, __nv_bfloat16>(rows, step_cols, a);
  }
  if (w.fp8) return LaunchConfig<__half, uint8_t>(rows, step_cols, a);
  return LaunchConfig<__half, __half>(rows, step_cols, a);
}

}  // namespace llm::cuda
