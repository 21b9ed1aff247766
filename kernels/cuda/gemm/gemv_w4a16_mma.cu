#include "kernels/cuda/gemm/gemv_w4a16_mma.h"

#include <algorithm>
#include <bit>
#include <type_traits>

#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/dynamic_smem.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/mma_sync.cuh"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/w4a16_common.cuh"
#include "kernels/cuda/norm/rms_norm_prologue.cuh"
#include "kernels/cuda/rope/qkv_rope_epilogue.cuh"

namespace llm::cuda {
namespace {

constexpr int kWarps = 8;                // warps a block
constexpr int kTileRows = kW4TileRows;   // weight rows a warp tile (the MMA's M): a tile of the layout
constexpr int kUnitChunks = kW4UnitChunks;  // a unit: one chunk per lane of a quad (4 x 32 columns of the tile)
constexpr int kMaxGroupSmem = 32 << 10;  // staged chunk groups (i32 a chunk)

struct MmaArgs {
  const uint8_t* codes;
  const uint16_t* scales;  // f16 bits [n, groups]
  const uint8_t* zeros;    // [n, groups] or null
  const int32_t* chunk_group;
  int groups;
  int group_shift;  // the regular kernels: unit u is in group u >> group_shift (-1: not regular)
};

// `v` as a value the compiler must keep in a register: it cannot see how it was formed, so it
// cannot rebuild it from the thread index at each use (the GEMV's loop is bound by instruction
// issue, and at 64 registers the compiler re-derived every lane address a unit: ~25 instructions).
template <typename V>
__device__ __forceinline__ V KeptInRegister(V v) {
  if constexpr (sizeof(V) == 8)
    asm volatile("" : "+l"(v));
  else
    asm volatile("" : "+r"(v));
  return v;
}

// A unit's codes: a warp's load covers 512 contiguous bytes of its tile, and the next units follow.
__device__ __forceinline__ uint4 LoadCodes(const void* p) { return LoadU4StreamingL2Prefetch256(p); }

// What one lane loads for one unit u: chunk c = 4u + t (t = lane % 4) of its two weight rows
// rA = tile + g and rB = rA + 8 (g = lane / 4), and those rows' scales and zeros of c's group. In
// the layout (w4a16_common.cuh) a full unit of a full tile is 1 KB: the warp's rA loads are its
// first 512 bytes, lane by lane, and the rB loads the next 512.
struct Unit {
  uint4 a, b;      // codes of rows rA, rB
  uint32_t scale;  // f16 bits: rA's in the low half, rB's in the high half
  uint32_t zero;   // rA's zero in bits 0-7, rB's in bits 8-15
  int group;       // c's group, -1 past the last chunk
};

// acc += scale * (a pass's sums over its chains): C fragment elements 0-1 are row g's (scale in
// the low half of `scale_bits`), 2-3 row g + 8's (the high half).
template <int NT, int kChains>
__device__ __forceinline__ void AccumulateScaled(float (&acc)[NT][4], const float (&p)[kChains][NT][4],
                                                 uint32_t scale_bits) {
  const float sa = __half2float(__ushort_as_half(static_cast<unsigned short>(scale_bits & 0xFFFF)));
  const float sb = __half2float(__ushort_as_half(static_cast<unsigned short>(scale_bits >> 16)));
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    float q[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) q[e] = kChains == 2 ? p[0][nt][e] + p[kChains - 1][nt][e] : p[0][nt][e];
    W4AccumulateScaled(acc[nt], q, sa, sb);
  }
}

// Lane (g, t) of a warp: t owns the MMA's K slots 2t, 2t + 1, 2t + 8, 2t + 9 in A (the weights) and
// B (x) alike, so it may fill them from its own chunk c = 4u + t as long as A and B agree: in k16
// step j = 2 jj + h, slots (2t, 2t + 1) hold chunk columns (8jj + 4h, + 1), the pair of nibbles
// 2h and 2h + 4 of code word jj (w4a16_common.cuh), and slots (2t + 8, 2t + 9) columns
// (8jj + 4h + 2, + 3); x's B registers are those columns of the same chunk, two adjacent bf16 a
// register as x lies in memory (no permutes). The four chunks of a unit are summed in one MMA, so
// their scales must agree: units whose chunks span groups (act-order, groups of 32 or 64) take
// four masked MMA passes, one chunk each.
//
// Block: kWarps warps = (kWarps / wpt) tiles of 16 rows x wpt warps splitting the tile's units;
// the wpt partial sums meet in shared memory. Shared memory: the chunk groups (i32 [kv]).
//
// kRegular: every tile full (N a multiple of 16), every unit full (Kp a multiple of 128) and in
// one group, groups in input order of a power of two units each (w.group_shift): the common
// shapes, with no per-unit checks, group lookups or uniformity votes (the loop is bound by
// instruction issue).
//
// kFusable (16-bit out, up to 8 rows): the instantiation that may normalize x itself into shared
// memory first (`norm`, after the chunk groups) and add its outputs into out (`add_to_out`).
//
// kFragmentX (5-32 rows): x comes in fragment order (FragmentOrderKernel, or NormFragmentOrderKernel
// where the norm is fused; below), so that a warp's load of one code word's x for one n8 tile is 512
// contiguous bytes: 4 L1 wavefronts where x in row order takes 16 (8 token rows x the quad's 4 chunks, 64
// bytes apart). Of the fusions it takes only the residual add (add_to_out), in its store.
template <typename T, typename TOut, int NT, int U, int kMinBlocks, bool kZeros, bool kRegular, bool kFusable,
          bool kFragmentX>
__global__ void __launch_bounds__(kWarps * 32, kMinBlocks)
    GemvW4A16MmaKernel(const T* __restrict__ x, MmaArgs w, const T* __restrict__ bias, TOut* __restrict__ out,
                       int m, int n, int kp, int wpt, int glu_f, FusedRmsNorm norm, bool add_to_out,
                       QkvRopeParams rope) {
  // The lean loads (below) where the kernel's registers are capped at 64 (4 blocks an SM) or x
  // comes in fragment order: there the compiler rebuilt every lane address a unit (~25 of ~200
  // instructions a unit), and the lean form measured 5-8% faster (w4a16_bench, H200: gate_up at
  // one row 22.1 -> 20.6 us, 16 rows in fragment order qkv 11.2 -> 10.6, gate_up 28.1 -> 25.9).
  // Elsewhere (2 blocks an SM, x in place: qkv, o and down at 1-8 rows) the same form was 5-29%
  // slower, and those keep the predicated loads.
  constexpr bool kLean = kRegular && (kMinBlocks >= 4 || kFragmentX);
  extern __shared__ __align__(16) int32_t s_group[];
  __shared__ float red[kWarps][kTileRows][NT * 8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int tiles_per_block = kWarps / wpt;
  // glu_f > 0 (the gate/up form): the block's first half of tiles are gate tiles, the second half
  // the up tiles of the same columns (glu_f / 16 tiles on).
  const int half = tiles_per_block / 2, block_tile = warp / wpt;
  // roped (kFusable with rope.q_out set: the QKV-RoPE end): the first half's tiles are rows of
  // elements below D / 2 of a head, the second half the tiles of their rotation partners.
  const bool roped = kFusable && rope.q_out != nullptr;
  const int half_head_tiles = roped ? rope.head_dim / (2 * kTileRows) : 1;
  // The gate/up and RoPE forms (at least two tiles a block): the first half's tile of this warp's pair.
  const int first_tile = half > 0 ? blockIdx.x * half + block_tile % half : 0;
  const int tile = roped ? first_tile / half_head_tiles * (2 * half_head_tiles) + first_tile % half_head_tiles +
                               (block_tile < half ? 0 : half_head_tiles)
                   : glu_f > 0 ? (block_tile < half ? 0 : glu_f / kTileRows) + first_tile
                               : blockIdx.x * tiles_per_block + block_tile;
  const int part = warp % wpt;
  const int kv = kp / kW4Chunk;
  const int units = (kv + kUnitChunks - 1) / kUnitChunks;
  const int len = (units + wpt - 1) / wpt;
  const int ub = min(units, part * len), ue = min(units, ub + len);
  const int rA = tile * kTileRows + g, rB = rA + 8;
  const bool inA = rA < n, inB = rB < n;
  const int tile_rows = inA ? W4TileRows(rA, n) : kTileRows;
  // The tile's codes, and this lane's offsets of a full unit (a short last unit is placed apart).
  const uint8_t* tile_codes = w.codes + static_cast<int64_t>(inA ? tile : 0) * kTileRows * (kp / 2);
  const int unit_bytes = tile_rows * kUnitChunks * kW4ChunkBytes;
  const int off_a = (g * kUnitChunks + t) * kW4ChunkBytes, off_b = ((g + 8) * kUnitChunks + t) * kW4ChunkBytes;
  const int full_units = kv / kUnitChunks;
  const uint8_t* lane_codes = nullptr;  // kLean: row rA's chunk t of unit 0
  if constexpr (kLean) lane_codes = KeptInRegister(tile_codes + off_a);
  // The rows' scales and zeros (row 0's for rows past n, whose loads are skipped), hoisted: the
  // loop is bound by instruction issue, and recomputing these a unit cost a tenth of it.
  const uint16_t* scales_a = w.scales + static_cast<int64_t>(inA ? rA : 0) * w.groups;
  const uint16_t* scales_b = w.scales + static_cast<int64_t>(inB ? rB : 0) * w.groups;
  const uint8_t* zeros_a = kZeros ? w.zeros + static_cast<int64_t>(inA ? rA : 0) * w.groups : nullptr;
  const uint8_t* zeros_b = kZeros ? w.zeros + static_cast<int64_t>(inB ? rB : 0) * w.groups : nullptr;

  // A unit's codes (no shared memory needed), then its group's scales and zeros. The lean loads
  // (kLean): every unit 1 KB, addresses from registers kept for it, and no predicates: a warp whose
  // tile is past n reads tile 0's codes and row 0's scales (its sums are never stored).
  auto load_codes = [&](Unit& r, int u) {
    if constexpr (kLean) {
      const uint8_t* unit = lane_codes + u * (kTileRows * kUnitChunks * kW4ChunkBytes);
      r.a = LoadCodes(unit);
      r.b = LoadCodes(unit + 8 * kUnitChunks * kW4ChunkBytes);
      return;
    }
    const uint8_t* unit = tile_codes + u * unit_bytes;
    int oa = off_a, ob = off_b;
    bool in_k = true;
    if (!kRegular && u >= full_units) {  // the short last unit
      const int cu = kv - u * kUnitChunks;
      in_k = t < cu;
      oa = (g * cu + t) * kW4ChunkBytes;
      ob = ((g + 8) * cu + t) * kW4ChunkBytes;
    }
    r.a = inA && in_k ? LoadCodes(unit + oa) : make_uint4(0, 0, 0, 0);
    r.b = inB && in_k ? LoadCodes(unit + ob) : make_uint4(0, 0, 0, 0);
  };
  auto load_side = [&](Unit& r, int u) {
    if constexpr (kLean) {
      r.group = u >> w.group_shift;
      r.scale = static_cast<uint32_t>(__ldg(scales_a + r.group)) |
                (static_cast<uint32_t>(__ldg(scales_b + r.group)) << 16);
      r.zero = kZeros ? static_cast<uint32_t>(__ldg(zeros_a + r.group)) |
                            (static_cast<uint32_t>(__ldg(zeros_b + r.group)) << 8)
                      : kW4SymmetricZero | (kW4SymmetricZero << 8);
      return;
    }
    const int c = u * kUnitChunks + t;
    const bool in_k = kRegular || c < kv;
    r.group = kRegular ? u >> w.group_shift : in_k ? s_group[c] : -1;
    const int grp = in_k ? r.group : 0;
    const uint32_t sa = inA ? __ldg(scales_a + grp) : 0u;
    const uint32_t sb = inB ? __ldg(scales_b + grp) : 0u;
    r.scale = sa | (sb << 16);
    if (kZeros) {
      const uint32_t za = inA ? __ldg(zeros_a + grp) : kW4SymmetricZero;
      const uint32_t zb = inB ? __ldg(zeros_b + grp) : kW4SymmetricZero;
      r.zero = za | (zb << 8);
    } else {
      r.zero = kW4SymmetricZero | (kW4SymmetricZero << 8);
    }
  };
  auto load = [&](Unit& r, int u) {
    load_codes(r, u);
    load_side(r, u);
  };

  // The first window's codes go out before the chunk groups are staged (and all of it before the
  // wait on the predecessor: weights are not its outputs).
  Unit cur[U];
#pragma unroll
  for (int i = 0; i < U; ++i) {
    cur[i] = Unit{};
    if (ub + i < ue) load_codes(cur[i], ub + i);
  }
  if (!kRegular) {
    for (int i = threadIdx.x; i < kv; i += blockDim.x) s_group[i] = __ldg(w.chunk_group + i);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < U; ++i)
    if (ub + i < ue) load_side(cur[i], ub + i);
  GridDependencyWait();  // x is the predecessor's output
  if constexpr (kFusable) {
    if (norm.weight != nullptr) {
      __shared__ float norm_scratch[16];
      T* xs = reinterpret_cast<T*>(s_group + (kRegular ? 0 : (kv + 3) / 4 * 4));
      NormalizeRowsToShared<T>(x, static_cast<const T*>(norm.weight), norm.eps, m, kp, xs, kp, norm_scratch);
      x = xs;
    }
  }

  // Fragment-order x: its norm was formed by the reordering kernel (NormFragmentOrderKernel); only
  // the residual add is the kernel's own.
  static_assert(!kFragmentX || !kFusable, "fragment-order x: not the fusable form");
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;

  // One MMA pass over unit u: every chunk's (all: they share a group), or chunk 4u + pass's
  // alone. Lane t owns the K slots of its chunk in A and B alike, so zeroing its x (B) registers
  // drops the chunk: the predicate of the x loads does it, at no cost to the unmasked pass (one
  // body for both keeps the unrolled window small for the instruction cache).
  const T* x_rows[NT];  // this lane's token of each n8 tile (token 0's past m: its loads are skipped)
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) x_rows[nt] = x + static_cast<int64_t>(nt * 8 + g < m ? nt * 8 + g : 0) * kp;
  // kLean: this lane's element offset of chunk t of unit 0 in each n8 tile's token row (32-bit:
  // one register each, which the compiler keeps instead of rebuilding the 64-bit row pointers).
  int x_lane[NT] = {};
  if constexpr (kLean) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      x_lane[nt] = KeptInRegister((nt * 8 + g < m ? nt * 8 + g : 0) * kp + t * kW4Chunk);
  }
  auto compute_pass = [&](const Unit& r, int u, int pass, bool all) {
    const int c = u * kUnitChunks + t;
    const bool mine = all || t == pass;
    // Symmetric formats: a constant (the unit's copy of it is not folded through the window).
    const uint32_t zpa = W4ZeroPair<T>(kZeros ? r.zero & 0xFF : kW4SymmetricZero);
    const uint32_t zpb = W4ZeroPair<T>(kZeros ? (r.zero >> 8) & 0xFF : kW4SymmetricZero);
    // kChains independent accumulators a tile (the halves h), so that consecutive MMAs do not
    // wait on each other.
    constexpr int kChains = NT == 1 ? 2 : 1;
    float p[kChains][NT][4];
#pragma unroll
    for (int ch = 0; ch < kChains; ++ch)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) p[ch][nt][e] = 0.0f;
    // Code word jj of the chunk holds its columns 8jj..8jj + 7; its half h is one k16 step: the
    // pairs (8jj + 4h, + 1) and (8jj + 4h + 2, + 3) (nibbles 2h and 2h + 1) in A, and in B the
    // same columns of x, words 2h and 2h + 1 of x's 16 bytes at column 8jj (token nt * 8 + g).
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      uint4 xv[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int token = nt * 8 + g;
        // Regular: no predicate; a token past m reads token 0's x (its sums are never stored).
        if constexpr (kFragmentX) {  // zero past m and past the last chunk already
          const bool valid = kRegular || (r.group >= 0 && mine);
          xv[nt] = valid ? reinterpret_cast<const uint4*>(x)[((u * kUnitChunks + jj) * NT + nt) * 32 + lane]
                         : make_uint4(0, 0, 0, 0);
        } else {
          const bool valid = kRegular || (token < m && r.group >= 0 && mine);
          const T* xp = kLean ? x + (x_lane[nt] + u * (kUnitChunks * kW4Chunk) + jj * 8)
                              : x_rows[nt] + (valid ? c : 0) * kW4Chunk + jj * 8;
          xv[nt] = valid ? *reinterpret_cast<const uint4*>(xp) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t a[4];
        W4AFragment<T>(W4Word(r.a, jj), W4Word(r.b, jj), h, zpa, zpb, a);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) Mma16816<T>::Run(p[h % kChains][nt], a, W4Word(xv[nt], 2 * h), W4Word(xv[nt], 2 * h + 1));
      }
    }
    // The scales of chunk 4u + pass (unmasked: of chunk 4u, which every lane's rows share; a lane
    // past the last chunk holds no scale of its own).
    AccumulateScaled(acc, p, __shfl_sync(0xffffffffu, r.scale, (lane & ~3) | pass));
  };
  auto compute = [&](const Unit& r, int u) {
    if (kRegular) {
      compute_pass(r, u, 0, true);
      return;
    }
    const int g0 = __shfl_sync(0xffffffffu, r.group, 0);
    const bool all = __all_sync(0xffffffffu, r.group < 0 || r.group == g0);
    const int passes = all ? 1 : kUnitChunks;
#pragma unroll 1
    for (int pass = 0; pass < passes; ++pass) compute_pass(r, u, pass, all);
  };

  // A rolling window of U units: each one's slot is refilled with the unit U further on as soon
  // as it has been consumed, so that U - 1 to U units' loads stay in flight.
  for (int base = ub; base < ue; base += U) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      if (base + i < ue) compute(cur[i], base + i);
      if (base + U + i < ue) load(cur[i], base + U + i);
    }
  }
  AllowDependentLaunch();

  // C fragments: (row g, tokens 2t, 2t + 1) and (row g + 8, the same tokens) of each n8 tile.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    red[warp][g][nt * 8 + 2 * t] = acc[nt][0];
    red[warp][g][nt * 8 + 2 * t + 1] = acc[nt][1];
    red[warp][g + 8][nt * 8 + 2 * t] = acc[nt][2];
    red[warp][g + 8][nt * 8 + 2 * t + 1] = acc[nt][3];
  }
  __syncthreads();
  if constexpr (kFusable && std::is_same_v<T, TOut>) {
    if (roped) {  // each rotation pair's two sums, rounded to T, then QkvRope's arithmetic and stores
      const int cols_per_block = half * kTileRows;
      for (int i = threadIdx.x; i < cols_per_block * m; i += blockDim.x) {
        const int token = i / cols_per_block, cl = i % cols_per_block;
        const int gt = cl / kTileRows, r = cl % kTileRows;
        const int ft = blockIdx.x * half + gt;  // the pair's first-half tile
        const int hh = ft / half_head_tiles, e = (ft % half_head_tiles) * kTileRows + r;
        const int row_lo = hh * rope.head_dim + e, row_hi = row_lo + rope.head_dim / 2;
        float lo = 0.0f, hi = 0.0f;
        for (int q = 0; q < wpt; ++q) lo += red[gt * wpt + q][r][token];
        for (int q = 0; q < wpt; ++q) hi += red[(gt + half) * wpt + q][r][token];
        if (bias) lo += ToFloat(bias[row_lo]), hi += ToFloat(bias[row_hi]);
        StoreRotatedPair<T>(rope, token, hh, e, ToFloat(FromFloat<T>(lo)), ToFloat(FromFloat<T>(hi)));
      }
      return;
    }
  }
  if constexpr (std::is_same_v<T, TOut>) {
    if (glu_f > 0) {  // out[token, col] = silu(gate) * up, each rounded to T first (as SiluMul reads them)
      const int cols_per_block = half * kTileRows;
      for (int i = threadIdx.x; i < cols_per_block * m; i += blockDim.x) {
        const int token = i / cols_per_block, cl = i % cols_per_block;
        const int col = blockIdx.x * cols_per_block + cl;
        const int gt = cl / kTileRows, r = cl % kTileRows;
        float gs = 0.0f, us = 0.0f;
        for (int q = 0; q < wpt; ++q) gs += red[gt * wpt + q][r][token];
        for (int q = 0; q < wpt; ++q) us += red[(gt + half) * wpt + q][r][token];
        if (bias) gs += ToFloat(bias[col]), us += ToFloat(bias[glu_f + col]);
        const float gate = ToFloat(FromFloat<T>(gs)), up = ToFloat(FromFloat<T>(us));
        out[static_cast<int64_t>(token) * glu_f + col] = FromFloat<T>(SiluFor<T>(gate) * up);
      }
      return;
    }
  }
  const int rows_per_block = tiles_per_block * kTileRows;
  for (int i = threadIdx.x; i < rows_per_block * m; i += blockDim.x) {
    const int token = i / rows_per_block, rl = i % rows_per_block;
    const int row = blockIdx.x * rows_per_block + rl;
    if (row >= n) continue;
    const int lt = rl / kTileRows, r = rl % kTileRows;
    float s = 0.0f;
    for (int q = 0; q < wpt; ++q) s += red[lt * wpt + q][r][token];
    if (bias) s += ToFloat(bias[row]);
    const int64_t at = static_cast<int64_t>(token) * n + row;
    if ((kFusable || kFragmentX) && add_to_out) {
      out[at] = FromFloat<TOut>(ToFloat(out[at]) + ToFloat(FromFloat<TOut>(s)));
    } else {
      out[at] = FromFloat<TOut>(s);
    }
  }
}

// x [m, kp] rewritten in the order the kFragmentX kernels' lanes read it: for unit u, code word jj,
// n8 tile nt and lane (g, t), 16 bytes: token 8 nt + g's columns 32 (4 u + t) + 8 jj .. + 7 (zero
// past m and past the last chunk). One thread a piece, writing consecutive pieces (the reads are
// gathers from x, which the producer has just left in L2).
constexpr int kFragmentThreads = 256;
// Below 5 rows the in-place loads cost little (4 rows: gate_up 24.6 us against 22.8 with every lane
// reading one row) and the reordering kernel would take it back (ReordersX).
constexpr int kFragmentMinRows = 5;

// n8 tiles of tokens for m rows of x (LaunchTyped's instantiations).
constexpr int TokenTilesOf(int64_t m) { return m > 16 ? 4 : m > 8 ? 2 : 1; }

// 16-byte pieces of x in fragment order: whole units of kp storage columns, nt n8 tiles.
__host__ __device__ constexpr int64_t FragmentPieces(int64_t kp, int nt) {
  return (kp / kW4Chunk + kUnitChunks - 1) / kUnitChunks * kUnitChunks * nt * 32;
}

template <typename T, int NT>
__global__ void __launch_bounds__(kFragmentThreads)
    FragmentOrderKernel(const T* __restrict__ x, T* __restrict__ out, int m, int kp) {
  const int kv = kp / kW4Chunk;
  const int pieces = static_cast<int>(FragmentPieces(kp, NT));
  const int i = blockIdx.x * kFragmentThreads + threadIdx.x;
  GridDependencyWait();
  AllowDependentLaunch();
  if (i >= pieces) return;
  const int lane = i & 31, nt = (i >> 5) % NT, unit_word = (i >> 5) / NT;  // unit_word = 4 u + jj
  const int token = nt * 8 + (lane >> 2);
  const int chunk = unit_word / kUnitChunks * kUnitChunks + (lane & 3), jj = unit_word % kUnitChunks;
  uint4 v = make_uint4(0, 0, 0, 0);
  if (token < m && chunk < kv)
    v = *reinterpret_cast<const uint4*>(x + static_cast<int64_t>(token) * kp + chunk * kW4Chunk + jj * 8);
  reinterpret_cast<uint4*>(out)[i] = v;
}

// The RMSNorm of x's rows written straight in fragment order (FragmentOrderKernel's pieces), for a
// norm fused into a 9-32-row call: one block a token row of the NT n8 tiles, with the norm kernel's
// held form (RmsNormHeldKernel: RmsNormHeldThreads threads, thread v holding the row's 16-byte
// chunks v, v + threads, ..., the same sums and roundings), each chunk then stored where the
// GEMV's lane reads it; rows past m and chunks past the last unit's end are zeros. It stands in for
// the norm kernel and the plain reordering, the same values bit for bit.
template <typename T, int NT, int kChunks>
__global__ void NormFragmentOrderKernel(const T* __restrict__ x, const T* __restrict__ weight, float eps,
                                        T* __restrict__ out, int m, int kp) {
  AllowDependentLaunch();
  constexpr int kVec = Vec16<T>::kVec;
  static_assert(kW4Chunk == 4 * kVec, "a chunk is four 16-byte vectors (its code words' columns)");
  __shared__ float scratch[32];
  const int token = blockIdx.x, kv = kp / kW4Chunk, vecs = kp / kVec;
  const int pieces = (kv + kUnitChunks - 1) / kUnitChunks * kUnitChunks * 4;  // a token's, in whole units
  const int nt = token / 8, lane_base = (token % 8) * 4;
  // Vector c of the row (chunk c / 4, code word c % 4) goes to its lane's piece.
  auto piece = [&](int c) {
    const int chunk = c / 4, unit_word = chunk / kUnitChunks * kUnitChunks + c % 4;
    return (unit_word * NT + nt) * 32 + lane_base + chunk % kUnitChunks;
  };
  Vec16<T> w[kChunks], v[kChunks];
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {  // no kernel writes the weight: read before the wait
    const int c = threadIdx.x + j * blockDim.x;
    if (token < m && c < vecs) w[j] = LoadVec(weight + c * kVec);
  }
  // The workspace is written only after the wait: the kernel before may still read it (another
  // linear's x in fragment order, or an act-order input's permuted rows).
  GridDependencyWait();
  uint4* o = reinterpret_cast<uint4*>(out);
  for (int c = (token < m ? vecs : 0) + threadIdx.x; c < pieces; c += blockDim.x)
    o[piece(c)] = make_uint4(0, 0, 0, 0);
  if (token >= m) return;
  const T* row = x + static_cast<int64_t>(token) * kp;
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c >= vecs) continue;
    v[j] = LoadVec(row + c * kVec);
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      const float f = ToFloat(v[j].v[e]);
      sum_sq += f * f;
    }
  }
  sum_sq = BlockSum(sum_sq, scratch);
  const float inv = rsqrtf(sum_sq / static_cast<float>(kp) + eps);
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int c = threadIdx.x + j * blockDim.x;
    if (c >= vecs) continue;
    const Vec16<T> normed = RmsNormScale(v[j], w[j], inv);
    o[piece(c)] = *reinterpret_cast<const uint4*>(&normed);
  }
}

template <typename T, int NT>
cudaError_t LaunchNormFragmentOrder(const T* x, const FusedRmsNorm& norm, T* out, int m, int kp, bool pdl,
                                    cudaStream_t stream) {
  const int vecs = kp / Vec16<T>::kVec, chunks = RmsNormHeldChunks(vecs);
  auto kernel = chunks == 1   ? NormFragmentOrderKernel<T, NT, 1>
                : chunks == 2 ? NormFragmentOrderKernel<T, NT, 2>
                : chunks == 4 ? NormFragmentOrderKernel<T, NT, 4>
                              : NormFragmentOrderKernel<T, NT, 8>;
  return LaunchKernel(kernel, dim3(NT * 8), dim3(RmsNormHeldThreads(vecs)), 0, stream, pdl, x,
                      static_cast<const T*>(norm.weight), norm.eps, out, m, kp);
}

// Warps splitting each tile's K: the most that keep every warp resident at once (and at least 4
// units a warp), counting `slots_per_warp` resident warp slots for each warp (2: half the SM's
// warp slots stay free).
int AutoWarpsPerTile(int64_t n, int64_t kp, int num_sms, int blocks_per_sm, int slots_per_warp) {
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t units = (kp / kW4Chunk + kUnitChunks - 1) / kUnitChunks;
  const int64_t warp_slots = int64_t{kWarps} * blocks_per_sm * num_sms;
  int wpt = 1;
  while (wpt < kWarps && tiles * slots_per_warp * wpt <= warp_slots && units / (2 * wpt) >= 4) wpt *= 2;
  return wpt;
}

// The register form's shape for m rows of x (the rule LaunchRegisters explains, below).
struct RegisterForm {
  bool very_wide = false;  // at least 8 tiles an SM (up to 16 rows of x): 4 blocks an SM
  bool long_rows = false;  // K >= 8192 (up to 8 rows of x): 3 units in flight
  int wpt = 1;             // warps a tile
};
RegisterForm RegisterFormOf(int64_t m, int64_t n, int64_t kp, int num_sms) {
  RegisterForm f;
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
  f.very_wide = m <= 16 && tiles >= 8 * int64_t{num_sms};
  if (m > 8) {
    f.wpt = f.very_wide ? 2 : AutoWarpsPerTile(n, kp, num_sms, 2, 2);
    return f;
  }
  f.long_rows = kp >= 8192;
  f.wpt = AutoWarpsPerTile(n, kp, num_sms, f.very_wide ? 4 : 2, f.long_rows && !f.very_wide ? 2 : 1);
  return f;
}

// Whether x goes through the workspace in fragment order (FragmentOrderKernel) for m rows of the
// register form `f`: from 9 rows, and from kFragmentMinRows for very wide weights alone (8 rows,
// w4a16_bench on an H200, the reordering included: gate_up 30.4 -> 23.3 us; qkv 6.6 -> 7.3, o
// 5.6 -> 6.2, down 14.3 -> 14.6).
bool ReordersX(int64_t m, const RegisterForm& f) { return m > 8 || (m >= kFragmentMinRows && f.very_wide); }

// The gate/up form's warps a tile: at least two tiles a block (a gate tile and its up tile), and
// F's tiles a whole number of blocks' halves (4 warps a tile: one pair a block, always whole).
int GluWarpsPerTile(int wpt, int64_t glu_cols) {
  if (glu_cols <= 0) return wpt;
  wpt = std::min(wpt, kWarps / 2);
  while (wpt < kWarps / 2 && (glu_cols / kTileRows) % (kWarps / wpt / 2) != 0) wpt *= 2;
  return wpt;
}

// reorder: x goes through o.x_workspace in fragment order first (LaunchRegisters decides).
template <typename T, typename TOut, int NT, int U, int B, bool kZeros>
cudaError_t LaunchTiles(const T* x, const MmaArgs& w, const T* bias, TOut* out, int m, int n, int kp, int wpt,
                        int glu_f, bool reorder, const GemvW4A16MmaOptions& o, cudaStream_t stream) {
  const int tiles_per_block = kWarps / wpt;
  const int tiles = (n + kTileRows - 1) / kTileRows;
  const dim3 grid(glu_f > 0 ? glu_f / kTileRows / (tiles_per_block / 2)
                  : o.rope != nullptr ? n / 2 / kTileRows / (tiles_per_block / 2)
                                      : (tiles + tiles_per_block - 1) / tiles_per_block);
  const bool regular = w.group_shift >= 0 && n % kTileRows == 0 && kp % (kUnitChunks * kW4Chunk) == 0;
  // Shared memory: the chunk groups (irregular kernels), then x normalized (a fused norm).
  const size_t groups_bytes = regular ? 0 : static_cast<size_t>(kp / kW4Chunk + 3) / 4 * 4 * sizeof(int32_t);
  if constexpr (NT == 1 && std::is_same_v<T, TOut>) {
    if (o.norm.active() || o.add_to_out || o.rope != nullptr) {
      const QkvRopeParams rope = o.rope != nullptr ? *o.rope : QkvRopeParams{};
      const size_t smem = groups_bytes + (o.norm.active() ? static_cast<size_t>(m) * kp * sizeof(T) : 0);
      if (regular)
        return LaunchKernel(GemvW4A16MmaKernel<T, TOut, NT, U, B, kZeros, true, true, false>, grid,
                            dim3(kWarps * 32), smem, stream, o.pdl, x, w, bias, out, m, n, kp, wpt, glu_f,
                            o.norm, o.add_to_out, rope);
      return LaunchKernel(GemvW4A16MmaKernel<T, TOut, NT, U, B, kZeros, false, true, false>, grid,
                          dim3(kWarps * 32), smem, stream, o.pdl, x, w, bias, out, m, n, kp, wpt, glu_f,
                          o.norm, o.add_to_out, rope);
    }
  }
  if (reorder) {
    const int64_t pieces = FragmentPieces(kp, NT);
    T* x_ws = static_cast<T*>(o.x_workspace);
    const cudaError_t err =
        o.norm.active()
            ? LaunchNormFragmentOrder<T, NT>(x, o.norm, x_ws, m, kp, o.pdl, stream)
            : LaunchKernel(FragmentOrderKernel<T, NT>,
                           dim3(static_cast<unsigned>((pieces + kFragmentThreads - 1) / kFragmentThreads)),
                           dim3(kFragmentThreads), 0, stream, o.pdl, x, x_ws, m, kp);
    if (err != cudaSuccess) return err;
    x = x_ws;
  }
  auto* kernel = reorder ? (regular ? GemvW4A16MmaKernel<T, TOut, NT, U, B, kZeros, true, false, true>
                                    : GemvW4A16MmaKernel<T, TOut, NT, U, B, kZeros, false, false, true>)
                         : (regular ? GemvW4A16MmaKernel<T, TOut, NT, U, B, kZeros, true, false, false>
                                    : GemvW4A16MmaKernel<T, TOut, NT, U, B, kZeros, false, false, false>);
  return LaunchKernel(kernel, grid, dim3(kWarps * 32), groups_bytes, stream, o.pdl, x, w, bias, out, m, n, kp,
                      wpt, glu_f, FusedRmsNorm{}, reorder && o.add_to_out, QkvRopeParams{});
}

// The register form's shape, by measurement on an H100 (w4a16_bench, the regular form at 1 row,
// benchmarks/RESULTS.md): up to 8 rows of x, few units (1 KB each) in flight a warp, which keeps
// the unrolled loop small for the instruction cache and the most warps resident, and K split over
// warps by the weight's width. Very wide weights (at least 8 tiles an SM: gate_up) take 4 blocks
// an SM and every warp slot (27.5 us; 2 blocks: 30.9); long rows (K >= 8192: down) 2 blocks, half
// the slots and 3 units in flight (15.0; 2 units 16.4, every slot 16.5); the rest (qkv, o) 2 blocks
// and every slot (7.3 and 5.7; half the slots 8.7 and 5.7). 9-32 rows (x in fragment order, on an
// H200): 2 units in flight, two blocks, half the slots (16 rows: qkv 11.2 us, o 6.7, down 16.8;
// 3 or 4 units, 3 or 4 blocks the same or slower; 32 rows: 3-4 blocks spill, 1.4-2.8x slower),
// but for very wide weights up to 16 rows: two warps a tile, 4 blocks an SM, one unit in flight
// (gate_up 28.0 against 33.4).
template <typename T, typename TOut, int NT, bool kZeros>
cudaError_t LaunchRegisters(const T* x, const MmaArgs& w, const T* bias, TOut* out, int m, int n, int kp,
                            const GemvW4A16MmaOptions& o, int num_sms, cudaStream_t stream) {
  const RegisterForm form = RegisterFormOf(m, n, kp, num_sms);
  const int wpt = GluWarpsPerTile(o.warps_per_tile > 0 ? o.warps_per_tile : form.wpt, o.glu_cols);
  const int f = static_cast<int>(o.glu_cols);
  const bool r = ReordersX(m, form) && o.x_workspace != nullptr &&
                 o.x_workspace_bytes >= GemvW4A16MmaXWorkspaceBytes(m, kp);
  if constexpr (NT == 1) {
    if (form.very_wide)
      return LaunchTiles<T, TOut, NT, 2, 4, kZeros>(x, w, bias, out, m, n, kp, wpt, f, r, o, stream);
    if (form.long_rows)
      return LaunchTiles<T, TOut, NT, 3, 2, kZeros>(x, w, bias, out, m, n, kp, wpt, f, r, o, stream);
  }
  if constexpr (NT == 2) {
    if (form.very_wide)
      return LaunchTiles<T, TOut, NT, 1, 4, kZeros>(x, w, bias, out, m, n, kp, wpt, f, r, o, stream);
  }
  return LaunchTiles<T, TOut, NT, 2, 2, kZeros>(x, w, bias, out, m, n, kp, wpt, f, r, o, stream);
}

// --- The bulk form: the codes through shared memory ---
//
// Each warp's tiles stream through a private ring of shared-memory stages filled by bulk copies
// (the copy engine; no registers held): a stage is `stage_chunks` chunks of each of the warp's
// rows, `stage_chunks / 4` consecutive units of each tile, contiguous in the layout: one copy a
// tile (lane tt copies tile tt), all completing on the stage's barrier. The lanes then read their
// MMA fragments from shared memory at the offsets the register form reads in global memory (a
// warp's 16-byte loads of one unit's rows are 512 contiguous bytes: no bank conflicts).
//
// TPW (1 or 2) tiles of 16 rows a warp: at 16-32 batch rows the x fragments (the B operand) are
// loaded once for both tiles. Scales, zeros and chunk groups stay in a register window U units
// ahead, as in the register form.

struct BulkPlan {
  int wpt = 1;           // warps splitting a warp tile's K (1, 2, 4, 8)
  int stage_chunks = 0;  // chunks of each row a stage (8, 16 or 32: 2-8 KB a tile)
  int stages = 0;        // ring stages a warp
  int bar_offset = 0, ring_offset = 0;  // shared memory: chunk groups (i32 [kv]) at 0, barriers, rings
  size_t smem_bytes = 0;
};

template <int TPW>
struct BulkSide {
  uint32_t scale[TPW];  // f16 bits: tile tt's row g in the low half, row g + 8 in the high half
  uint32_t zero[TPW];   // row g's zero in bits 0-7, row g + 8's in bits 8-15
  int group;            // chunk 4u + t's group, -1 past the last chunk
};

template <typename T, typename TOut, int NT, int TPW, int U, bool kZeros>
__global__ void __launch_bounds__(kWarps * 32, TPW * NT >= 8 ? 1 : 2)
    GemvW4A16BulkKernel(const T* __restrict__ x, MmaArgs w, const T* __restrict__ bias, TOut* __restrict__ out, int m,
                        int n, int kp, BulkPlan plan) {
  constexpr int kRows = kTileRows * TPW;  // weight rows a warp
  static_assert(kRows <= 32, "one bulk copy a lane");
  extern __shared__ __align__(128) unsigned char smem[];
  const int32_t* s_group = reinterpret_cast<const int32_t*>(smem);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int wpt = plan.wpt, stages = plan.stages;
  const int wtiles_per_block = kWarps / wpt;
  const int row0 = (blockIdx.x * wtiles_per_block + warp / wpt) * kRows, part = warp % wpt;
  const int kv = kp / kW4Chunk;
  const int units = (kv + kUnitChunks - 1) / kUnitChunks;
  const int len = (units + wpt - 1) / wpt;
  const int ub = min(units, part * len), ue = min(units, ub + len);
  const int ce = min(kv, ue * kUnitChunks);
  const int su = plan.stage_chunks / kUnitChunks;  // units a stage
  const int nstages = (ue - ub + su - 1) / su;
  const int tile_stage_bytes = kTileRows * plan.stage_chunks * kW4ChunkBytes;  // a tile's part of a stage
  const int stage_bytes = TPW * tile_stage_bytes;
  int tile_rows[TPW];  // rows of each of the warp's tiles (0 past n)
#pragma unroll
  for (int tt = 0; tt < TPW; ++tt) tile_rows[tt] = max(0, min(kTileRows, n - (row0 + tt * kTileRows)));
  const int64_t tile_bytes = static_cast<int64_t>(kTileRows) * (kp / 2);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + plan.bar_offset) + warp * stages;
  unsigned char* ring = smem + plan.ring_offset + static_cast<size_t>(warp) * stages * stage_bytes;
  const uint64_t policy = L2EvictFirstPolicy();

  // Stage q of the warp's range into slot q % stages: chunks [cb, min(ce, cb + stage_chunks)) of
  // every row of the warp's tiles, units ub + q * su on of each tile (lane tt copies tile tt).
  auto issue = [&](int q) {
    const int ua = ub + q * su, cb = ua * kUnitChunks;
    const uint32_t chunk_bytes = static_cast<uint32_t>(min(ce, cb + plan.stage_chunks) - cb) * kW4ChunkBytes;
    uint64_t* bar = &bars[q % stages];
    if (lane == 0) {
      uint32_t bytes = 0;
#pragma unroll
      for (int tt = 0; tt < TPW; ++tt) bytes += chunk_bytes * tile_rows[tt];
      MbarrierArriveExpectTx(bar, bytes);
    }
    __syncwarp();
#pragma unroll
    for (int tt = 0; tt < TPW; ++tt)
      if (lane == tt && tile_rows[tt] > 0)
        BulkCopyToShared(ring + (q % stages) * stage_bytes + tt * tile_stage_bytes,
                    w.codes + (row0 / kTileRows + tt) * tile_bytes +
                        static_cast<int64_t>(ua) * tile_rows[tt] * kUnitChunks * kW4ChunkBytes,
                    chunk_bytes * tile_rows[tt], bar, policy);
  };
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) MbarrierInit(&bars[s], 1);
    FenceMbarrierInit();
  }
  __syncwarp();
  // The first stages go out before anything else (weights are not the predecessor's outputs).
  for (int q = 0; q < min(stages, nstages); ++q) issue(q);
  for (int i = threadIdx.x; i < kv; i += blockDim.x) const_cast<int32_t*>(s_group)[i] = __ldg(w.chunk_group + i);
  __syncthreads();

  auto load_side = [&](BulkSide<TPW>& r, int u) {
    const int c = u * kUnitChunks + t;
    const bool in_k = c < kv;
    r.group = in_k ? s_group[c] : -1;
    const int grp = in_k ? r.group : 0;
#pragma unroll
    for (int tt = 0; tt < TPW; ++tt) {
      const int ra = row0 + tt * kTileRows + g, rb = ra + 8;
      const bool ina = ra < n, inb = rb < n;
      const uint32_t sa = ina ? __ldg(w.scales + static_cast<int64_t>(ra) * w.groups + grp) : 0u;
      const uint32_t sb = inb ? __ldg(w.scales + static_cast<int64_t>(rb) * w.groups + grp) : 0u;
      r.scale[tt] = sa | (sb << 16);
      if (kZeros) {
        const uint32_t za = ina ? __ldg(w.zeros + static_cast<int64_t>(ra) * w.groups + grp) : kW4SymmetricZero;
        const uint32_t zb = inb ? __ldg(w.zeros + static_cast<int64_t>(rb) * w.groups + grp) : kW4SymmetricZero;
        r.zero[tt] = za | (zb << 8);
      } else {
        r.zero[tt] = kW4SymmetricZero | (kW4SymmetricZero << 8);
      }
    }
  };
  BulkSide<TPW> cur[U];
#pragma unroll
  for (int i = 0; i < U; ++i)
    if (ub + i < ue) load_side(cur[i], ub + i);
  GridDependencyWait();  // x is the predecessor's output

  float acc[TPW][NT][4];
#pragma unroll
  for (int tt = 0; tt < TPW; ++tt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[tt][nt][e] = 0.0f;

  auto compute = [&](const BulkSide<TPW>& r, int u) {
    const int c = u * kUnitChunks + t;
    const int li = u - ub, q = li / su, within = li - q * su;
    const int slot = q % stages;
    if (within == 0) MbarrierWait(&bars[slot], (q / stages) & 1);
    // This lane's chunk c of rows g and g + 8 of each tile, where the layout put them (zero past
    // the last chunk and the tile's rows: the stage holds no bytes there).
    const int cu = W4UnitChunks(c, kv);
    uint4 ca[TPW], cb[TPW];
#pragma unroll
    for (int tt = 0; tt < TPW; ++tt) {
      const unsigned char* st = ring + slot * stage_bytes + tt * tile_stage_bytes +
                                within * tile_rows[tt] * (kUnitChunks * kW4ChunkBytes) + t * kW4ChunkBytes;
      ca[tt] = *reinterpret_cast<const uint4*>(st + g * cu * kW4ChunkBytes);
      cb[tt] = *reinterpret_cast<const uint4*>(st + (g + 8) * cu * kW4ChunkBytes);
      if (c >= kv || g >= tile_rows[tt]) ca[tt] = make_uint4(0, 0, 0, 0);
      if (c >= kv || g + 8 >= tile_rows[tt]) cb[tt] = make_uint4(0, 0, 0, 0);
    }
    // The stage's last unit: every lane has its codes in registers, refill the slot.
    if (within == su - 1 || u == ue - 1) {
      __syncwarp();
      FenceProxyAsyncShared();
      if (q + stages < nstages) issue(q + stages);
    }
    uint32_t zpa[TPW], zpb[TPW];
#pragma unroll
    for (int tt = 0; tt < TPW; ++tt) {
      zpa[tt] = W4ZeroPair<T>(r.zero[tt] & 0xFF);
      zpb[tt] = W4ZeroPair<T>((r.zero[tt] >> 8) & 0xFF);
    }
    const int g0 = __shfl_sync(0xffffffffu, r.group, 0);
    const bool uniform = __all_sync(0xffffffffu, r.group < 0 || r.group == g0);
    const int passes = uniform ? 1 : kUnitChunks;  // as the register form
    for (int pass = 0; pass < passes; ++pass) {
      const bool mine = uniform || t == pass;
      constexpr int kChains = NT == 1 ? 2 : 1;  // as the register form: the same sums
      float p[TPW][kChains][NT][4];
#pragma unroll
      for (int tt = 0; tt < TPW; ++tt)
#pragma unroll
        for (int ch = 0; ch < kChains; ++ch)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) p[tt][ch][nt][e] = 0.0f;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {  // as the register form
        uint4 xv[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const int token = nt * 8 + g;
          const bool valid = token < m && r.group >= 0 && mine;
          const T* xp = x + static_cast<int64_t>(valid ? token : 0) * kp + (valid ? c : 0) * kW4Chunk + jj * 8;
          xv[nt] = valid ? *reinterpret_cast<const uint4*>(xp) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int tt = 0; tt < TPW; ++tt) {
            uint32_t a[4];
            W4AFragment<T>(W4Word(ca[tt], jj), W4Word(cb[tt], jj), h, zpa[tt], zpb[tt], a);
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
              Mma16816<T>::Run(p[tt][h % kChains][nt], a, W4Word(xv[nt], 2 * h), W4Word(xv[nt], 2 * h + 1));
          }
        }
      }
#pragma unroll
      for (int tt = 0; tt < TPW; ++tt)
        AccumulateScaled(acc[tt], p[tt], __shfl_sync(0xffffffffu, r.scale[tt], (lane & ~3) | pass));
    }
  };

  for (int base = ub; base < ue; base += U) {
#pragma unroll
    for (int i = 0; i < U; ++i) {
      if (base + i < ue) compute(cur[i], base + i);
      if (base + U + i < ue) load_side(cur[i], base + U + i);
    }
  }
  AllowDependentLaunch();

  // Every copy has been waited on: the rings hold the partial sums, red[warp][kRows][NT * 8].
  __syncthreads();
  constexpr int kCols = NT * 8;
  float* red = reinterpret_cast<float*>(smem + plan.ring_offset);
#pragma unroll
  for (int tt = 0; tt < TPW; ++tt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      float* ra = red + (warp * kRows + tt * kTileRows + g) * kCols + nt * 8 + 2 * t;
      float* rb = ra + 8 * kCols;
      ra[0] = acc[tt][nt][0];
      ra[1] = acc[tt][nt][1];
      rb[0] = acc[tt][nt][2];
      rb[1] = acc[tt][nt][3];
    }
  __syncthreads();
  const int rows_per_block = wtiles_per_block * kRows;
  for (int i = threadIdx.x; i < rows_per_block * m; i += blockDim.x) {
    const int token = i / rows_per_block, rl = i % rows_per_block;
    const int row = blockIdx.x * rows_per_block + rl;
    if (row >= n) continue;
    const int lt = rl / kRows, rr = rl % kRows;
    float s = 0.0f;
    for (int q = 0; q < wpt; ++q) s += red[((lt * wpt + q) * kRows + rr) * kCols + token];
    if (bias) s += ToFloat(bias[row]);
    out[static_cast<int64_t>(token) * n + row] = FromFloat<TOut>(s);
  }
}

constexpr int64_t kSmemPerSm = 228 * 1024;  // sm_90: shared memory an SM (1 KB of it reserved a block)

// The bulk form's plan for a warp of `tpw` tiles; options' zeros pick the defaults. False where the
// stages do not fit a block's shared memory.
bool PlanBulk(int64_t n, int64_t kp, int tpw, const GemvW4A16MmaOptions& o, int num_sms, BulkPlan* plan) {
  BulkPlan p;
  const int rows = kTileRows * tpw;
  const int64_t kv = kp / kW4Chunk, units = (kv + kUnitChunks - 1) / kUnitChunks;
  p.stage_chunks = o.stage_chunks > 0 ? o.stage_chunks : tpw == 1 ? 16 : 8;
  p.stages = o.stages > 0 ? o.stages : tpw == 1 ? 2 : 4;
  if (p.stage_chunks % 8 != 0 || p.stage_chunks > 32 || p.stages < 1 || p.stages > 8) return false;
  p.bar_offset = static_cast<int>((kv * 4 + 15) / 16 * 16);
  p.ring_offset = (p.bar_offset + kWarps * p.stages * 8 + 127) / 128 * 128;
  // The rings, which the partial sums reuse at the end (red[kWarps][rows][32 tokens] at most).
  const size_t ring_bytes = size_t{kWarps} * p.stages * rows * p.stage_chunks * kW4ChunkBytes;
  const size_t red_bytes = size_t{kWarps} * rows * kGemvW4A16MmaMaxRows * sizeof(float);
  p.smem_bytes = static_cast<size_t>(p.ring_offset) + std::max(ring_bytes, red_bytes);
  if (p.smem_bytes > 227 * 1024) return false;
  const int64_t blocks_per_sm = std::max<int64_t>(1, std::min<int64_t>(2, kSmemPerSm / (p.smem_bytes + 1024)));
  const int64_t wtiles = (n + rows - 1) / rows;
  const int64_t su = p.stage_chunks / kUnitChunks;
  if (o.warps_per_tile > 0) {
    p.wpt = o.warps_per_tile;
  } else {
    // The most warps a tile that keeps every warp resident at once and at least a stage a warp.
    p.wpt = 1;
    while (p.wpt < kWarps && wtiles * 2 * p.wpt <= kWarps * blocks_per_sm * num_sms && units / (2 * p.wpt) >= su)
      p.wpt *= 2;
  }
  *plan = p;
  return true;
}

template <typename T, typename TOut, int NT, int TPW, bool kZeros>
cudaError_t LaunchBulk(const T* x, const MmaArgs& w, const T* bias, TOut* out, int m, int n, int kp,
                       const BulkPlan& plan, bool pdl, cudaStream_t stream) {
  constexpr int U = NT == 1 ? 4 : 2;  // units of scales in flight a warp
  auto* kernel = GemvW4A16BulkKernel<T, TOut, NT, TPW, U, kZeros>;
  const cudaError_t err = AllowDynamicSmem(kernel, plan.smem_bytes);
  if (err != cudaSuccess) return err;
  const int rows_per_block = kWarps / plan.wpt * kTileRows * TPW;
  const dim3 grid((n + rows_per_block - 1) / rows_per_block);
  return LaunchKernel(kernel, grid, dim3(kWarps * 32), plan.smem_bytes, stream, pdl, x, w, bias, out, m, n, kp, plan);
}

template <typename T, typename TOut, int NT, int TPW>
cudaError_t LaunchBulkZ(const T* x, const MmaArgs& w, const T* bias, TOut* out, int m, int n, int kp,
                        const BulkPlan& plan, bool pdl, cudaStream_t stream) {
  return w.zeros ? LaunchBulk<T, TOut, NT, TPW, true>(x, w, bias, out, m, n, kp, plan, pdl, stream)
                 : LaunchBulk<T, TOut, NT, TPW, false>(x, w, bias, out, m, n, kp, plan, pdl, stream);
}

template <typename T, typename TOut>
absl::Status LaunchTyped(const void* xv, const W4A16Weights& wd, const void* bv, void* ov, int m, int n, int kp,
                         int num_sms, const GemvW4A16MmaOptions& o, Stream stream) {
  // Groups of a power of two whole units: the regular kernels compute a unit's group.
  const uint64_t units_per_group = wd.group_chunks % kUnitChunks == 0 ? wd.group_chunks / kUnitChunks : 0;
  const int group_shift = std::has_single_bit(units_per_group) ? std::countr_zero(units_per_group) : -1;
  const MmaArgs w{wd.codes, static_cast<const uint16_t*>(wd.scales), wd.zeros, wd.chunk_group,
                  static_cast<int>(wd.groups), group_shift};
  const T* x = static_cast<const T*>(xv);
  const T* bias = static_cast<const T*>(bv);
  TOut* out = static_cast<TOut*>(ov);
  const int tpw = o.tiles_per_warp > 0 ? o.tiles_per_warp : m <= 8 ? 1 : 2;
  using Form = GemvW4A16MmaOptions::Form;
  const bool fused = o.norm.active() || o.add_to_out || o.rope != nullptr;  // the register form's alone
  // Above 16 rows without an x workspace, the bulk form (x's fragments shared by two tiles); with
  // one, the register form reading x in fragment order is faster (benchmarks/RESULTS.md).
  const bool bulk = !fused && o.glu_cols == 0 &&
                    (o.form == Form::kBulk || (o.form == Form::kAuto && m > 16 && o.x_workspace == nullptr));
  BulkPlan plan;
  if (bulk && (tpw == 1 || tpw == 2) && PlanBulk(n, kp, tpw, o, num_sms, &plan)) {
    cudaError_t err;
    if (m <= 8)
      err = tpw == 1 ? LaunchBulkZ<T, TOut, 1, 1>(x, w, bias, out, m, n, kp, plan, o.pdl, stream)
                     : LaunchBulkZ<T, TOut, 1, 2>(x, w, bias, out, m, n, kp, plan, o.pdl, stream);
    else if (m <= 16)
      err = tpw == 1 ? LaunchBulkZ<T, TOut, 2, 1>(x, w, bias, out, m, n, kp, plan, o.pdl, stream)
                     : LaunchBulkZ<T, TOut, 2, 2>(x, w, bias, out, m, n, kp, plan, o.pdl, stream);
    else
      err = tpw == 1 ? LaunchBulkZ<T, TOut, 4, 1>(x, w, bias, out, m, n, kp, plan, o.pdl, stream)
                     : LaunchBulkZ<T, TOut, 4, 2>(x, w, bias, out, m, n, kp, plan, o.pdl, stream);
    CUDA_RETURN_IF_ERROR(err);
    return absl::OkStatus();
  }
  cudaError_t err;
  const bool zeros = wd.zeros != nullptr;
  if (m <= 8)
    err = zeros ? LaunchRegisters<T, TOut, 1, true>(x, w, bias, out, m, n, kp, o, num_sms, stream)
                : LaunchRegisters<T, TOut, 1, false>(x, w, bias, out, m, n, kp, o, num_sms, stream);
  else if (m <= 16)
    err = zeros ? LaunchRegisters<T, TOut, 2, true>(x, w, bias, out, m, n, kp, o, num_sms, stream)
                : LaunchRegisters<T, TOut, 2, false>(x, w, bias, out, m, n, kp, o, num_sms, stream);
  else
    err = zeros ? LaunchRegisters<T, TOut, 4, true>(x, w, bias, out, m, n, kp, o, num_sms, stream)
                : LaunchRegisters<T, TOut, 4, false>(x, w, bias, out, m, n, kp, o, num_sms, stream);
  CUDA_RETURN_IF_ERROR(err);
  return absl::OkStatus();
}

}  // namespace

size_t GemvW4A16MmaXWorkspaceBytes(int64_t m, int64_t kp) {
  if (m < kFragmentMinRows || m > kGemvW4A16MmaMaxRows || kp <= 0) return 0;
  return static_cast<size_t>(FragmentPieces(kp, TokenTilesOf(m))) * sizeof(uint4);
}

bool GemvW4A16MmaFuses(int64_t m, int64_t n, int64_t kp, bool norm, int64_t glu_cols, int num_sms,
                       size_t x_workspace_bytes) {
  if (m < 1 || m > kGemvW4A16MmaMaxRows || n < 1 || kp <= 0 || kp % kW4Chunk != 0) return false;
  if (m > 8) {  // x through the workspace in fragment order: the reordering kernel forms the norm
    return x_workspace_bytes >= GemvW4A16MmaXWorkspaceBytes(m, kp) && kp / kW4Chunk * 4 <= kMaxGroupSmem &&
           (!norm || RmsNormHeldChunks(kp * 2 / 16) > 0);
  }
  if (kp / kW4Chunk * 4 + (norm ? m * kp * 2 : 0) > (48 << 10)) return false;
  if (!norm) return true;
  const RegisterForm form = RegisterFormOf(m, n, kp, num_sms);
  const int tiles_per_block = kWarps / GluWarpsPerTile(form.wpt, glu_cols);
  const int64_t tiles = (n + kTileRows - 1) / kTileRows;
  const int64_t blocks = glu_cols > 0 ? glu_cols / kTileRows / std::max(1, tiles_per_block / 2)
                                      : (tiles + tiles_per_block - 1) / tiles_per_block;
  return GemvNormTakes(m, kp, 2) && blocks <= int64_t{form.very_wide ? 4 : 2} * num_sms;
}

bool GemvW4A16MmaRopeSameSums(int64_t m, int64_t n, int64_t kp, int num_sms, const QkvRopeParams& rope) {
  if (m < 1 || m > 8 || kp <= 0 || kp % kW4Chunk != 0 || !GemvRopeTakes(n, rope) || rope.head_dim % (2 * kTileRows) != 0)
    return false;
  const int wpt = RegisterFormOf(m, n, kp, num_sms).wpt;
  const int half = kWarps / wpt / 2;  // first-half tiles a block: whole heads' halves, whole blocks
  const int64_t half_head_tiles = rope.head_dim / (2 * kTileRows);
  return half >= 1 && half_head_tiles % half == 0;
}

bool GemvW4A16MmaGluSameSums(int64_t m, int64_t n, int64_t kp, int num_sms) {
  if (m < 1 || m > 16 || n % (2 * kTileRows) != 0 || kp <= 0 || kp % kW4Chunk != 0) return false;
  const int wpt = RegisterFormOf(m, n, kp, num_sms).wpt;
  return GluWarpsPerTile(wpt, n / 2) == wpt;
}

absl::Status LaunchGemvW4A16Mma(DType dtype, DType out_dtype, const void* x, const W4A16Weights& w, const void* bias,
                                void* out, int64_t m, int64_t n, int64_t kp, int num_sms, int warps_per_tile, bool pdl,
                                Stream stream) {
  GemvW4A16MmaOptions o;
  o.warps_per_tile = warps_per_tile;
  o.pdl = pdl;
  return LaunchGemvW4A16Mma(dtype, out_dtype, x, w, bias, out, m, n, kp, num_sms, o, stream);
}

absl::Status LaunchGemvW4A16Mma(DType dtype, DType out_dtype, const void* x, const W4A16Weights& w, const void* bias,
                                void* out, int64_t m, int64_t n, int64_t kp, int num_sms,
                                const GemvW4A16MmaOptions& options, Stream stream) {
  if (m < 0 || m > kGemvW4A16MmaMaxRows || n <= 0 || n > 0x7fffffff - 16 || kp <= 0 || kp % kW4Chunk != 0 ||
      kp / kW4Chunk * 4 > kMaxGroupSmem || w.codes == nullptr || w.scales == nullptr || w.chunk_group == nullptr ||
      w.groups < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("GemvW4A16Mma: unsupported shape m ", m, " n ", n, " kp ", kp, " groups ", w.groups));
  if (!Aligned16(x) || !Aligned16(w.codes)) return absl::InvalidArgumentError("GemvW4A16Mma: misaligned operands");
  const int wpt = options.warps_per_tile;
  if (wpt != 0 && wpt != 1 && wpt != 2 && wpt != 4 && wpt != 8)
    return absl::InvalidArgumentError("GemvW4A16Mma: warps_per_tile");
  if (options.glu_cols != 0 && (options.glu_cols * 2 != n || options.glu_cols % kTileRows != 0 || out_dtype != dtype))
    return absl::InvalidArgumentError(absl::StrCat("GemvW4A16Mma: the gate/up form takes N = 2F with F a multiple of ",
                                                   kTileRows, " and an output in the input dtype (N ", n, ", F ",
                                                   options.glu_cols, ")"));
  if (m > 0 && options.rope != nullptr &&
      (options.glu_cols != 0 || options.add_to_out || out_dtype != dtype || options.form == GemvW4A16MmaOptions::Form::kBulk ||
       options.rope->num_tokens < m ||
       !GemvW4A16MmaRopeSameSums(m, n, kp, num_sms, *options.rope) ||
       (options.warps_per_tile != 0 && options.warps_per_tile != RegisterFormOf(m, n, kp, num_sms).wpt)))
    return absl::InvalidArgumentError(absl::StrCat("GemvW4A16Mma: the QKV-RoPE end takes the register form's own warps "
                                                   "a tile, up to 8 rows, no q/k norms and whole rotated heads (N ",
                                                   n, ")"));
  if (m > 0 && (options.norm.active() || options.add_to_out) &&
      (out_dtype != dtype || options.form == GemvW4A16MmaOptions::Form::kBulk ||
       (options.add_to_out && options.glu_cols != 0) ||
       (options.norm.active() && !Aligned16(options.norm.weight)) ||
       (m <= 8 ? kp / kW4Chunk * 4 + (options.norm.active() ? m * kp * 2 : 0) > (48 << 10) ||
                     (options.norm.active() && !GemvNormTakes(m, kp, 2))
               : options.x_workspace == nullptr ||
                     !GemvW4A16MmaFuses(m, n, kp, options.norm.active(), options.glu_cols, num_sms,
                                        options.x_workspace_bytes))))
    return absl::InvalidArgumentError(
        absl::StrCat("GemvW4A16Mma: a fused norm or residual add takes the register form, "
                     "up to 8 rows (9-32 with the x workspace), an output in the input "
                     "dtype and an aligned norm weight (m ",
                     m, ", kp ", kp, ")"));
  if (m == 0) return absl::OkStatus();
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(kp);
  if (dtype == DType::kBF16) {
    if (out_dtype == DType::kBF16)
      return LaunchTyped<__nv_bfloat16, __nv_bfloat16>(x, w, bias, out, mi, ni, ki, num_sms, options, stream);
    if (out_dtype == DType::kF32) return LaunchTyped<__nv_bfloat16, float>(x, w, bias, out, mi, ni, ki, num_sms, options, stream);
  } else if (dtype == DType::kF16) {
    if (out_dtype == DType::kF16) return LaunchTyped<__half, __half>(x, w, bias, out, mi, ni, ki, num_sms, options, stream);
    if (out_dtype == DType::kF32) return LaunchTyped<__half, float>(x, w, bias, out, mi, ni, ki, num_sms, options, stream);
  }
  return absl::InvalidArgumentError("GemvW4A16Mma: bf16/fp16 inputs, output in the input dtype or float32");
}

}  // namespace llm::cuda
