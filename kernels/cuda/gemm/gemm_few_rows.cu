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
#include "kernels/cuda/gemm/stream_k.cuh"
#include "kernels/cuda/gemm/w4a16_common.cuh"

namespace llm::cuda {
namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kMinStepCols = 128;
constexpr int kMaxTileRows = 256;
constexpr int kSmemBudget = 220 << 10;  // of the 227 KB a block may have
constexpr int kMaxSlotFloats = kMaxTileRows * 64;  // a block's sums of one tile: 256 x 64 (16-bit, E4M3) or 128 x 128 (int4)
constexpr int kUnitCols = kW4Chunk * kW4UnitChunks;  // int4: columns of a unit of the layout
constexpr int kUnitBytes = kW4TileRows * kW4UnitChunks * kW4ChunkBytes;  // a full unit of a full tile

using WeightType = GemmFewRowsWeightType;

// A block's tile: kTileRows weight rows (kWarps warps of one or two m16 tiles) by 8 x kTokenTiles
// tokens (n8 tiles, all of x's rows). A stage holds kStepCols columns of the tile's W and of x.
// Each row of x and of 16-bit or E4M3 W is one bulk copy of its kStepCols columns a stage, stored
// with a pitch that keeps the fragment loads conflict-free: 16-bit rows padded by 64 bytes (pitch
// / 16 = 4 mod 8: the two rows of a quarter warp's 16-byte loads land 4 bank groups apart), E4M3
// rows by 32 (pitch / 8 = 4 mod 16: the four rows of a half warp's 8-byte loads land in 4
// different 32-byte groups). Int4 W: a stage of an m16 tile is kStepCols / 128 whole units,
// contiguous in the layout (one copy an m16 tile, a warp's 16-byte loads of a unit's rows 512
// contiguous bytes); x's rows padded by 32 bytes there (the lanes' word order below).
//
// kSplit warps share each m16 tile, each taking kTokenTiles / kSplit of the n8 tiles (warp w of
// the block: rows of warp w % kWarps, token part w / kWarps): more warps to hide latency where a
// warp has many MMAs a stage.
template <int kTileRows, int kTokenTiles, int kStepCols, WeightType kW, int kSplit = 1>
struct FewRowsTile {
  static constexpr bool kInt4 = kW == WeightType::kInt4;
  static constexpr int kBlockWarps = kWarps * kSplit;
  static constexpr int kWarpTokenTiles = kTokenTiles / kSplit;
  static_assert(kTokenTiles % kSplit == 0, "whole n8 tiles a warp");
  static constexpr int kXRowBytes = kStepCols * 2;  // bytes a bulk copy of x's row
  static constexpr int kRowBytes = kXRowBytes + (kInt4 ? 32 : 64);  // x's pitch
  // Bytes a bulk copy of W: a row's step (16-bit or E4M3), an m16 tile's step (int4).
  static constexpr int kWCopyBytes = kInt4 ? kStepCols / kUnitCols * kUnitBytes
                                           : kStepCols * (kW == WeightType::k16Bit ? 2 : 1);
  static constexpr int kWRowBytes = kInt4 ? 0 : kWCopyBytes + (kW == WeightType::k16Bit ? 64 : 32);
  static constexpr int kRowsPerWarp = kTileRows / kWarps;
  static constexpr int kWarpTiles = kRowsPerWarp / 16;
  static constexpr int kTokens = 8 * kTokenTiles;
  static constexpr int kWBytes = kInt4 ? kTileRows / 16 * kWCopyBytes : kTileRows * kWRowBytes;
  static constexpr int kStageBytes = kWBytes + kTokens * kRowBytes;
  // Three stages: two in flight while the third is read. Deeper rings (as many as 220 KB held, up
  // to 8, or 16 of the small int4 stages) were slower: the more bytes every block has queued at
  // once, the less evenly DRAM serves the blocks' equal stream-K shares, and the step waits for the
  // last. On an H100, three against that: FP8 steps at 5 and 8 rows -3.1% and -2.9%, int4 at 17-32
  // rows -1.5% to -1.8%; four stages were between (benchmarks/RESULTS.md, sixteenth session).
  // (Stages of 16-bit rows over 73 KB: two.)
  static constexpr int kStages = kSmemBudget / kStageBytes > 3 ? 3 : kSmemBudget / kStageBytes;
  static_assert(kStages >= 2, "two stages fit");
  static constexpr int kBarOffset = kStages * kStageBytes;  // a full barrier a stage
  static constexpr int kFlagOffset = kBarOffset + kStages * 8;
  // A block has its SM to itself (stream_k.cuh): the grid is one block an SM, and the workspace
  // holds that many blocks' slots.
  static constexpr int kSmemBytes = StreamKBlockSmemBytes(kFlagOffset + 16);
  // A straddling tile's float32 sums, in fragment order: [warp][m16 tile][n8 tile][lane][4].
  static constexpr int kSlotFloats = kTileRows * kTokens;
  static_assert(kSlotFloats <= kMaxSlotFloats, "the workspace's slots hold a tile's sums");
  static_assert(kRowsPerWarp % 16 == 0 && kRowsPerWarp <= 32, "whole m16 tiles, a row copy a lane");
  static_assert(kStepCols % (kInt4 ? kUnitCols : 32) == 0 && kStageBytes % 16 == 0,
                "whole 32-column blocks (int4: units), aligned stages");
};

// Per-row weight scales of E4M3 weights (scale[row / rows_per]); 16-bit weights have none.
struct RowScales {
  const float* scale = nullptr;
  int rows_per = 1;
};

// Int4 weights' scales (f16 bits [n, groups]) and zeros (u8 [n, groups], or null: 8); unit u of
// the layout (128 columns) is in group u >> group_shift.
struct Int4Side {
  const uint16_t* scales = nullptr;
  const uint8_t* zeros = nullptr;
  int groups = 0;
  int group_shift = 0;
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

// Int4 weights, one stage of the block's tile for this warp (layout and lane order: the kernel's
// comment): acc[i][j] += scale x (the stage's units' sums of m16 tile i and n8 tile j).
template <typename T, typename C, int kTokenTiles>
__device__ __forceinline__ void Int4Stage(const unsigned char* ws, const unsigned char* xs, const Int4Side& side,
                                          int tile, int step, int n, int warp, int part, int lane,
                                          float (&acc)[C::kWarpTiles][kTokenTiles][4]) {
  constexpr int kUnits = C::kWCopyBytes / kUnitBytes;  // units a stage
  const int g = lane >> 2, t = lane & 3, swap = (t >> 1) & 1;
  // Per m16 tile: rows rA = ... + g and rB = rA + 8 (both in W or both past it: n % 16 == 0).
  int row_a[C::kWarpTiles];
#pragma unroll
  for (int i = 0; i < C::kWarpTiles; ++i) row_a[i] = tile * C::kRowsPerWarp * kWarps + warp * C::kRowsPerWarp + i * 16 + g;
#pragma unroll
  for (int uu = 0; uu < kUnits; ++uu) {
    const int group = (step * kUnits + uu) >> side.group_shift;
    float sa[C::kWarpTiles], sb[C::kWarpTiles];
    uint32_t za[C::kWarpTiles], zb[C::kWarpTiles];
    uint4 wa[C::kWarpTiles], wb[C::kWarpTiles];
#pragma unroll
    for (int i = 0; i < C::kWarpTiles; ++i) {
      const bool in = row_a[i] < n;
      const int64_t ia = static_cast<int64_t>(in ? row_a[i] : 0) * side.groups + group;
      const int64_t ib = ia + (in ? 8 * static_cast<int64_t>(side.groups) : 0);
      sa[i] = __half2float(__ushort_as_half(__ldg(side.scales + ia)));
      sb[i] = __half2float(__ushort_as_half(__ldg(side.scales + ib)));
      za[i] = W4ZeroPair<T>(side.zeros ? __ldg(side.zeros + ia) : kW4SymmetricZero);
      zb[i] = W4ZeroPair<T>(side.zeros ? __ldg(side.zeros + ib) : kW4SymmetricZero);
      const unsigned char* unit = ws + (warp * C::kWarpTiles + i) * C::kWCopyBytes + uu * kUnitBytes + lane * 16;
      uint4 a = *reinterpret_cast<const uint4*>(unit), b = *reinterpret_cast<const uint4*>(unit + kUnitBytes / 2);
      // Word jj of the lane's order is word jj ^ swap of the chunk.
      wa[i] = swap ? make_uint4(a.y, a.x, a.w, a.z) : a;
      wb[i] = swap ? make_uint4(b.y, b.x, b.w, b.z) : b;
    }
    float p[C::kWarpTiles][kTokenTiles][4];  // the unit's sums
#pragma unroll
    for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[i][j][e] = 0.0f;
    const unsigned char* x_unit = xs + (part * kTokenTiles * 8 + g) * C::kRowBytes + (uu * kUnitCols + t * kW4Chunk) * 2;
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      uint32_t a[C::kWarpTiles][2][4];
#pragma unroll
      for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          W4AFragment<T>(W4Word(wa[i], jj), W4Word(wb[i], jj), h, za[i], zb[i], a[i][h]);
        }
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j) {
        const uint4 xv = *reinterpret_cast<const uint4*>(x_unit + j * 8 * C::kRowBytes + ((jj ^ swap) * 8) * 2);
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < C::kWarpTiles; ++i)
            Mma16816<T>::Run(p[i][j], a[i][h], W4Word(xv, 2 * h), W4Word(xv, 2 * h + 1));
      }
    }
#pragma unroll
    for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
      for (int j = 0; j < kTokenTiles; ++j) W4AccumulateScaled(acc[i][j], p[i][j], sa[i], sb[i]);
  }
}

// K order inside a 32-column block: lane t holds physical columns 8t..8t+7 (one 16-byte load of
// W's rows g and g + 8 and of x's token row g); the first k16 MMA takes columns 8t..8t+3 as its
// logical k {2t, 2t+1, 2t+8, 2t+9}, the second 8t+4..8t+7. A and B use the same order, so the
// dot products are those of the true order, and no ldmatrix or shuffle is needed.
// E4M3 weights: the same order, a lane reading 8 weight bytes of each row and
// widening them in registers (exact), each row's scale applied to its sums.
//
// Int4 weights: lane (g, t) reads the 16 bytes of chunk t of its rows g and g + 8 of a unit (as
// the tensor-core GEMV does from global memory, gemv_w4a16_mma.cu) and fills the MMA's K slots
// 2t, 2t + 1, 2t + 8, 2t + 9 from them, x's B registers from the same columns of its token: a
// k16 MMA sums four chunks' columns, one a lane. Lane t takes the chunk's code words in the order
// jj ^ (t / 2) (any order sums the same, as long as A and B agree), so a quarter warp's x loads,
// two token rows apart by a pitch of 32 mod 128 bytes, fall in 8 different 16-byte bank groups.
// A unit is in one group: its MMAs sum into fresh accumulators, scaled into the sums after it.
template <typename T, WeightType kW, int kTileRows, int kTokenTiles, int kStepCols, int kSplit>
__global__ void __launch_bounds__(kThreads * kSplit)
    GemmFewRowsKernel(const T* __restrict__ x, const void* __restrict__ w, RowScales scales, Int4Side side,
                      const T* __restrict__ bias, T* __restrict__ out, int m, int n, int k, float* __restrict__ slots,
                      unsigned* __restrict__ counters) {
  constexpr bool kFp8 = kW == WeightType::kE4M3, kInt4 = kW == WeightType::kInt4;
  using C = FewRowsTile<kTileRows, kTokenTiles, kStepCols, kW, kSplit>;
  constexpr int kStages = C::kStages, kRowBytes = C::kRowBytes, kBlockWarps = C::kBlockWarps;
  constexpr int kWTT = C::kWarpTokenTiles;  // n8 tiles a warp
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, block_warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int warp = block_warp % kWarps, part = block_warp / kWarps;  // rows, token part
  const int steps = k / kStepCols;
  const int tiles = (n + kTileRows - 1) / kTileRows;
  const int total = tiles * steps, blocks = gridDim.x;
  const int begin = StreamKRangeBegin(blockIdx.x, total, blocks), end = StreamKRangeBegin(blockIdx.x + 1, total, blocks);

  auto w_stage = [&](int s) { return smem + s * C::kStageBytes; };
  auto x_stage = [&](int s) { return smem + s * C::kStageBytes + C::kWBytes; };
  // Stage s fills when every warp has arrived on full[s] announcing its bytes and the copies
  // have landed: warp w copies its own W rows (a row a lane) and x's rows w, w + 8, ... W rows past
  // n and x rows past m are not copied: their stale bytes reach only outputs that are not written
  // (an output element is the dot product of its own weight row and token).
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + C::kBarOffset);
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) MbarrierInit(&full[s], kBlockWarps);
    FenceMbarrierInit();
  }
  __syncthreads();
  const int x_rows_mine = m > block_warp ? (m - block_warp + kBlockWarps - 1) / kBlockWarps : 0;
  // W's rows are copied by the first token part's warps.
  auto w_rows_in = [&](int tile) {
    return part != 0 ? 0 : min(C::kRowsPerWarp, max(0, n - tile * kTileRows - warp * C::kRowsPerWarp));
  };
  // Lane 0 announces the warp's bytes of the stage (W rows of `tile`, and x's rows), then the
  // lanes copy the W rows.
  auto load_w = [&](int s, int tile, int step) {
    const int rows = w_rows_in(tile);
    const int copies = kInt4 ? rows / 16 : rows;  // int4: n is a multiple of 16
    if (lane == 0)
      MbarrierArriveExpectTx(&full[s], copies * C::kWCopyBytes + x_rows_mine * C::kXRowBytes);
    __syncwarp();
    if (lane < copies) {
      if constexpr (kInt4) {  // m16 tile `lane` of the warp: its step's units, contiguous
        const int lt = warp * C::kWarpTiles + lane;
        const int64_t layout_tile = (static_cast<int64_t>(tile) * kTileRows) / 16 + lt;
        BulkCopyToShared(w_stage(s) + lt * C::kWCopyBytes,
                         static_cast<const uint8_t*>(w) + layout_tile * 16 * (k / 2) +
                             static_cast<int64_t>(step) * C::kWCopyBytes,
                         C::kWCopyBytes, &full[s]);
      } else {
        const int r = warp * C::kRowsPerWarp + lane;
        BulkCopyToShared(w_stage(s) + r * C::kWRowBytes,
                         static_cast<const unsigned char*>(w) +
                             (static_cast<int64_t>(tile * kTileRows + r) * k + step * kStepCols) * (kFp8 ? 1 : 2),
                         C::kWCopyBytes, &full[s]);
      }
    }
  };
  auto load_x = [&](int s, int step) {
    if (lane < x_rows_mine) {
      const int r = block_warp + lane * kBlockWarps;
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

  float acc[C::kWarpTiles][kWTT][4];
  auto zero = [&] {
#pragma unroll
    for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
      for (int j = 0; j < kWTT; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
  };
  zero();
  const int warp_row0 = warp * C::kRowsPerWarp;
  // Fragment (i, j) element e: weight row warp_row0 + 16 i + g (+ 8 for e >= 2), token 8 (part x
  // kWTT + j) + 2 t + (e & 1).
  auto store = [&](int tile, int i, int j, const float v[4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = tile * kTileRows + warp_row0 + i * 16 + g + (e >= 2 ? 8 : 0);
      const int token = (part * kWTT + j) * 8 + 2 * t + (e & 1);
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
        for (int j = 0; j < kWTT; ++j) store(tile, i, j, acc[i][j]);
      return;
    }
    // A straddling tile: every contributor stores its sums in a slot of its own; the last to
    // arrive adds them in block order and writes the tile (stream_k.cuh).
    const StreamKStraddle straddle(tile, steps, total, blocks);
    const int first = straddle.first, last = straddle.last;
    const int frag = block_warp * (C::kWarpTiles * kWTT * 128) + lane * 4;
    auto slot_of = [&](int b) { return slots + straddle.Slot(b) * C::kSlotFloats + frag; };
    float* mine = slot_of(blockIdx.x);
#pragma unroll
    for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
      for (int j = 0; j < kWTT; ++j)
        __stcg(reinterpret_cast<float4*>(mine + (i * kWTT + j) * 128),
               make_float4(acc[i][j][0], acc[i][j][1], acc[i][j][2], acc[i][j][3]));
    // One fence, by the thread that counts, after the barrier (as in StreamKSumStraddle).
    __syncthreads();
    if (tid == 0) {
      __threadfence();
      *last_flag = atomicAdd(&counters[first], 1u) == static_cast<unsigned>(last - first);
      __threadfence();
    }
    __syncthreads();
    if (*last_flag) {  // every contributor's sums are stored
#pragma unroll
      for (int i = 0; i < C::kWarpTiles; ++i)
#pragma unroll
        for (int j = 0; j < kWTT; ++j) {
          float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
          for (int b = first; b <= last; ++b) {
            const float4 p = __ldcg(reinterpret_cast<const float4*>(slot_of(b) + (i * kWTT + j) * 128));
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
    // This block's last stage has landed: the next kernel may launch beside it (as in
    // gemm_fp8_wgmma.cu; it still waits for the whole grid before reading the output).
    if (it == end - 1) AllowDependentLaunch();

    const unsigned char* ws = w_stage(local % kStages);
    const unsigned char* xs = x_stage(local % kStages);
    if constexpr (kInt4) {
      Int4Stage<T, C, kWTT>(ws, xs, side, tile, step, n, warp, part, lane, acc);
    } else {
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
      uint4 b[kWTT];
#pragma unroll
      for (int j = 0; j < kWTT; ++j)
        b[j] = *reinterpret_cast<const uint4*>(xs + ((part * kWTT + j) * 8 + g) * kRowBytes + chunk);
      // The block's two k16 steps one after the other over all tiles: an accumulator's two MMAs
      // are kWTT x kWarpTiles MMAs apart, not back to back.
#pragma unroll
      for (int j = 0; j < kWTT; ++j)
#pragma unroll
        for (int i = 0; i < C::kWarpTiles; ++i) Mma16816<T>::Run(acc[i][j], a[i][0], b[j].x, b[j].y);
#pragma unroll
      for (int j = 0; j < kWTT; ++j)
#pragma unroll
        for (int i = 0; i < C::kWarpTiles; ++i) Mma16816<T>::Run(acc[i][j], a[i][1], b[j].z, b[j].w);
    }
    }

    if (step == steps - 1 || it == end - 1) {
      finish(tile, seg_from, step + 1);
      zero();
      seg_from = 0;
    }
    if (++step == steps) step = 0, ++tile;
  }
}

struct FewRowsArgs {
  const void* x;
  const void* w;
  RowScales scales;
  Int4Side side;
  const void* bias;
  void* out;
  int m, n, k, num_sms;
  GemmFewRowsWorkspace ws;
  bool pdl;
  Stream stream;
  int split = 1;  // warps an m16 tile (int4, 128-row tiles, 9+ rows of x: 1 or 2)
};

template <typename T, WeightType kW, int kTileRows, int kTokenTiles, int kStepCols, int kSplit = 1>
absl::Status LaunchTyped(const FewRowsArgs& a) {
  using C = FewRowsTile<kTileRows, kTokenTiles, kStepCols, kW, kSplit>;
  auto kernel = GemmFewRowsKernel<T, kW, kTileRows, kTokenTiles, kStepCols, kSplit>;
  const int n = a.n, k = a.k;
  const GemmFewRowsWorkspace& ws = a.ws;
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(kernel, C::kSmemBytes));
  const int total = (n + kTileRows - 1) / kTileRows * (k / kStepCols);
  const int blocks = std::min(total, a.num_sms);
  const StreamKSlots sums = StreamKSlotsIn(ws.data, ws.bytes, a.num_sms, blocks, C::kSlotFloats);
  if (sums.slots == nullptr) return absl::InternalError("GemmFewRows: workspace too small");
  CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, dim3(blocks), dim3(kThreads * kSplit), C::kSmemBytes, a.stream, a.pdl,
                                    static_cast<const T*>(a.x), a.w, a.scales, a.side, static_cast<const T*>(a.bias),
                                    static_cast<T*>(a.out), a.m, n, k, sums.slots, sums.counters));
  return absl::OkStatus();
}

template <typename T, WeightType kW, int kTileRows, int kStepCols>
absl::Status LaunchRows(const FewRowsArgs& a) {
  if constexpr (kW == WeightType::kInt4) {
    if (a.split == 2) {
      if (a.m <= 64) return LaunchTyped<T, kW, kTileRows, 8, kStepCols, 2>(a);
      return LaunchTyped<T, kW, kTileRows, 16, kStepCols, 2>(a);
    }
  }
  if (a.m <= 8) return LaunchTyped<T, kW, kTileRows, 1, kStepCols>(a);
  if (a.m <= 16) return LaunchTyped<T, kW, kTileRows, 2, kStepCols>(a);
  if (a.m <= 32) return LaunchTyped<T, kW, kTileRows, 4, kStepCols>(a);
  if (a.m <= 64) return LaunchTyped<T, kW, kTileRows, 8, kStepCols>(a);
  if constexpr (kW == WeightType::kInt4) return LaunchTyped<T, kW, kTileRows, 16, kStepCols>(a);
  return absl::InvalidArgumentError(absl::StrCat("GemmFewRows: no form for ", a.m, " rows of x"));
}

// The forms: 16-bit weights in 128 x 128, 128 x 256 and 256 x 128 tiles (rows x columns a stage);
// E4M3 weights in 128 x 128, 128 x 256 and 256 x 256; int4 weights in 128 x 128 and 128 x 256
// (256-row tiles were slower at every row count on an H100: benchmarks/RESULTS.md).
template <typename T, WeightType kW>
absl::Status LaunchConfig(int tile_rows, int step_cols, const FewRowsArgs& a) {
  if (tile_rows == 128 && step_cols == 128) return LaunchRows<T, kW, 128, 128>(a);
  if (tile_rows == 128 && step_cols == 256) return LaunchRows<T, kW, 128, 256>(a);
  if constexpr (kW == WeightType::k16Bit) {
    if (tile_rows == 256 && step_cols == 128) return LaunchRows<T, kW, 256, 128>(a);
  }
  if constexpr (kW == WeightType::kE4M3) {
    if (tile_rows == 256 && step_cols == 256) return LaunchRows<T, kW, 256, 256>(a);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("GemmFewRows: no form with ", tile_rows, "-row tiles and ", step_cols, "-column steps"));
}

template <typename T>
absl::Status LaunchWeightType(WeightType type, int tile_rows, int step_cols, const FewRowsArgs& a) {
  switch (type) {
    case WeightType::k16Bit: return LaunchConfig<T, WeightType::k16Bit>(tile_rows, step_cols, a);
    case WeightType::kE4M3: return LaunchConfig<T, WeightType::kE4M3>(tile_rows, step_cols, a);
    case WeightType::kInt4: return LaunchConfig<T, WeightType::kInt4>(tile_rows, step_cols, a);
  }
  return absl::InvalidArgumentError("GemmFewRows: weight type");
}

// Int4: unit u of the layout is in group u >> shift (-1: the groups are not that regular).
int Int4GroupShift(const W4A16Weights& w, int64_t k) {
  if (w.groups == 1) return 30;
  if (w.group_chunks <= 0 || w.group_chunks % kW4UnitChunks != 0) return -1;
  const int64_t units = w.group_chunks / kW4UnitChunks;
  if ((units & (units - 1)) != 0 || w.groups != (k / kUnitCols + units - 1) / units) return -1;
  int shift = 0;
  while ((int64_t{1} << shift) < units) ++shift;
  return shift;
}

}  // namespace

size_t GemmFewRowsWorkspaceBytes(int num_sms) {
  return StreamKWorkspaceBytes(num_sms, kMaxSlotFloats);
}

bool GemmFewRowsSupports(DType dtype, DType out_dtype, const GemmFewRowsWeights& w, int64_t m, int64_t n, int64_t k) {
  const bool common = (dtype == DType::kBF16 || dtype == DType::kF16) && out_dtype == dtype && m >= 1 &&
                      m <= GemmFewRowsMaxRows(w.type) && n >= 1 && k >= kMinStepCols && k % kMinStepCols == 0 &&
                      (n + 127) / 128 * (k / kMinStepCols) < (int64_t{1} << 30);
  if (!common || w.type != WeightType::kInt4) return common;
  return n % kW4TileRows == 0 && w.int4.codes != nullptr && w.int4.scales != nullptr && w.int4.groups >= 1 &&
         Int4GroupShift(w.int4, k) >= 0;
}

absl::Status LaunchGemmFewRows(DType dtype, const void* x, const GemmFewRowsWeights& w, const void* bias, void* out,
                               int64_t m, int64_t n, int64_t k, int num_sms, const GemmFewRowsWorkspace& workspace,
                               const GemmFewRowsOptions& options, Stream stream) {
  if (!GemmFewRowsSupports(dtype, dtype, w, m, n, k))
    return absl::InvalidArgumentError(absl::StrCat("GemmFewRows: unsupported call m ", m, " n ", n, " k ", k, " ",
                                                   std::string(DTypeName(dtype))));
  const bool int4 = w.type == WeightType::kInt4, fp8 = w.type == WeightType::kE4M3;
  const void* wdata = int4 ? static_cast<const void*>(w.int4.codes) : w.data;
  if (!Aligned16(x) || !Aligned16(wdata) || !Aligned16(out) || num_sms < 1)
    return absl::InvalidArgumentError("GemmFewRows: misaligned operands");
  if (fp8 && (w.scale == nullptr || w.scale_rows_per < 1))
    return absl::InvalidArgumentError("GemmFewRows: E4M3 weights need their row scales");
  if (workspace.data == nullptr || workspace.bytes < GemmFewRowsWorkspaceBytes(num_sms))
    return absl::InvalidArgumentError("GemmFewRows: no workspace");
  if (options.token_split < 0 || options.token_split > 2)
    return absl::InvalidArgumentError(absl::StrCat("GemmFewRows: token_split ", options.token_split, " (0, 1 or 2)"));
  // 128-row tiles split narrow W (N = 4096) into more tiles, so fewer of them straddle blocks;
  // 256-column steps read 512-byte runs of each 16-bit weight row (64-column steps, 128-byte runs,
  // streamed at 10% less). Measured on an H100 (benchmarks/RESULTS.md).
  const int tile_rows = options.tile_rows != 0 ? options.tile_rows : 128;
  int step_cols = options.step_cols != 0 ? options.step_cols : 256;
  int rows = int4 ? 128 : tile_rows;
  if (!fp8 && !int4 && rows == 256) step_cols = std::min(step_cols, 128);  // 256 x 256 x 2 bytes: no room for 2 stages
  if (fp8 && rows == 256 && k % 256 != 0) rows = 128;  // its 256-row tiles take 256-column steps
  if (fp8 && rows == 256) step_cols = 256;
  while (step_cols > kMinStepCols && k % step_cols != 0) step_cols /= 2;
  FewRowsArgs a{x,
                wdata,
                RowScales{w.scale, static_cast<int>(std::min<int64_t>(w.scale_rows_per, n))},
                Int4Side{},
                bias,
                out,
                static_cast<int>(m),
                static_cast<int>(n),
                static_cast<int>(k),
                num_sms,
                workspace,
                options.pdl,
                stream};
  // Two warps an m16 tile from 33 rows of x (int4): by measurement on an H100 (8B
  // int4 step) batch 64 9.73 -> 9.22 ms, 128 16.26 -> 15.57; at 16 and 32 rows one warp is faster
  // (4.74 against 5.26 ms, 6.04 against 6.40).
  a.split = int4 && m > 32 ? (options.token_split != 0 ? options.token_split : 2) : 1;
  if (int4)
    a.side = Int4Side{static_cast<const uint16_t*>(w.int4.scales), w.int4.zeros, static_cast<int>(w.int4.groups),
                      Int4GroupShift(w.int4, k)};
  if (dtype == DType::kBF16) return LaunchWeightType<__nv_bfloat16>(w.type, rows, step_cols, a);
  return LaunchWeightType<__half>(w.type, rows, step_cols, a);
}

}  // namespace llm::cuda
