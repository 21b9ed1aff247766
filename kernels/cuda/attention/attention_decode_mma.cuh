// Internal: decode attention on the tensor cores (mma.sync m16n8k16, float32 accumulation) for
// head_dim 64 or 128 over 16-bit or FP8 E4M3 caches, one query token per sequence.
//
// Why: the warp-per-32-keys kernel (attention_decode.cuh) does the group's G x D multiply-adds per
// key on the CUDA cores, one key per lane. With GQA (G = 4 for the Llama-3 shapes) that is ~1,500
// instructions a warp per 32 keys, and over an FP8 cache (half the bytes a key, plus the widening)
// the SMs run out of issue slots before the memory system runs out of bandwidth: 41-56% of the read
// bandwidth in the 8B-shape steps, against 61-74% over bf16. Here a warp's 16 keys cost 32 MMAs:
//   S = Q K^T  the G query heads are the rows of the A operand (16 rows, G used), K the B operand
//              (ldmatrix from the staged tile); 8 k-steps of 16 columns for D = 128;
//   softmax    online, per head, in the log2 domain (as the prefill kernel: the scale goes into the
//              exponent);
//   O += P V   P's accumulators become the A operand directly (FlashAttention-2), V the B operand
//              through ldmatrix.trans.
// Rows G..15 of every MMA are padding: the tensor cores have ~10x the throughput this needs, and
// what counts is that a warp's instructions per byte stay far below the SM's issue rate.
//
// Memory: each warp owns its own keys (16 at a time, tiles warp, warp + W, ... of the block's
// slice) and a ring of kStages tiles in shared memory filled by cp.async, so that kStages - 1 tiles
// a warp (two blocks an SM: 64-128 KB an SM; an FP8 cache's grids of two waves of three or more:
// four blocks) are always in flight; warps never wait for each other until the merge
// (attention_decode_merge.cuh). A block's first tiles of keys from earlier steps are copied before
// its grid-dependency wait: only the step's own key is written by the kernel before it.
//
// An FP8 cache is staged as bytes (half the shared memory a key) and widened exactly to f16 in
// registers; the MMAs then run in f16 (Q converted, saturating at 65504; P in
// [0, 1]). ldmatrix reads the byte tiles as 16-bit pairs, so the fragments come out permuted, and
// the MMAs' freedom of order absorbs it: for S, a lane's four K slots of a 16-column step are four
// adjacent bytes (4t..4t+3, with Q loaded in the same order); for O, the transposing ldmatrix gives
// a lane two adjacent bytes of two keys, which one byte permute splits into an even-column and an
// odd-column n8 tile of V, and the output is stored back in order. Over an FP8 cache O is kept
// transposed (Oᵀ += Vᵀ Pᵀ, DecodeMmaState): the padding rows above cost accumulator registers
// (half of O's), and without them four blocks share an SM instead of three.
#pragma once

#include <type_traits>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attention_decode_merge.cuh"
#include "kernels/cuda/attention/attention_mma_common.cuh"
#include "kernels/cuda/common/fp8.cuh"

namespace llm::cuda::attention {

constexpr int kDecodeMmaWarps = 4;
constexpr int kDecodeMmaThreads = 32 * kDecodeMmaWarps;
constexpr int kDecodeMmaTileKeys = 16;  // keys a warp takes at a time
constexpr int kDecodeMmaKeysPerBlockStep = kDecodeMmaWarps * kDecodeMmaTileKeys;
constexpr int kDecodeMmaMaxSplits = DecodeMergeMaxSplits<kDecodeMmaWarps, 64>();

// Operand type of the MMAs: the cache's 16-bit type, or f16 for an FP8 cache (E4M3 widens exactly
// to f16 in one instruction).
template <typename T, bool kFp8>
using DecodeMmaOperand = std::conditional_t<kFp8, __half, T>;

// Dynamic shared memory: per warp, kStages tiles of K rows then V rows (swizzled [16][D] of T, or of
// bytes for FP8: SwzBytes), read by ldmatrix; after the loop, the merge area aliases all of it.
template <typename T, int G, int D, bool kFp8>
struct DecodeMmaSmem {
  // Three a warp, two in flight, for either cache: an FP8 cache's tiles are half as large, but
  // six of them (five in flight) made the step 0.4-1.2% slower at 32-256 rows on an H100 (the
  // more bytes every block has queued at once, the less evenly DRAM serves the blocks, as for the
  // GEMMs' rings; benchmarks/RESULTS.md, sixteenth session).
  static constexpr int kStages = 3;
  static constexpr size_t kTileBytes = (kFp8 ? 1 : sizeof(T)) * 2 * kDecodeMmaTileKeys * D;  // K + V
  static constexpr size_t kWarpBytes = kStages * kTileBytes;
  static constexpr size_t kLoopBytes = kDecodeMmaWarps * kWarpBytes;
  static constexpr size_t kMergeBytes = DecodeMergeArea<kDecodeMmaWarps, G, D>::kBytes;
  static constexpr size_t kBytes = kLoopBytes > kMergeBytes ? kLoopBytes : kMergeBytes;
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of D-byte rows (an FP8 stage), XOR-
// swizzled so that the 8 rows an ldmatrix reads at one logical chunk fall in 8 different bank
// groups (rows of 64 bytes: two share a 128-byte line).
template <int D>
__device__ __forceinline__ int SwzBytes(int row, int chunk) {
  constexpr int kRowsPerLine = 128 / D, kChunks = D / 16;
  return row * D + ((chunk ^ ((row / kRowsPerLine) & (kChunks - 1))) << 4);
}

// A bf16 query pair as the f16 operands of an FP8 cache's MMAs: saturating, so that a query beyond
// f16's range stays finite.
__device__ __forceinline__ uint32_t PackHalf2Saturating(float lo, float hi) {
  uint32_t v;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));
  return v;
}

// The pieces of a warp's key loop.

// Q as the A operand from `q` (the block's first query head; `rows` of them valid, D apart: global
// memory or a staged copy in shared memory): rows = heads (row g of the fragment; rows >= `rows`
// and g + 8 are zero), k = head dimensions, a0 and a2 of each 16-column step.
template <typename T, int D, bool kFp8>
__device__ __forceinline__ void DecodeMmaLoadQ(uint32_t (&qa)[D / 16][2], const T* q, int rows, int lane) {
  using OT = DecodeMmaOperand<T, kFp8>;
  const int g = lane >> 2, c2 = 2 * (lane & 3);
  const T* qrow = q + min(g, rows - 1) * static_cast<int64_t>(D);
  auto pair = [&](int col) -> uint32_t {  // q[col], q[col + 1] as an OT pair
    if (g >= rows) return 0u;
    const uint32_t raw = *reinterpret_cast<const uint32_t*>(qrow + col);
    if constexpr (std::is_same_v<T, OT>) {
      return raw;
    } else {
      const T* e = reinterpret_cast<const T*>(&raw);
      return PackHalf2Saturating(ToFloat(e[0]), ToFloat(e[1]));
    }
  };
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    // FP8: the slots 2t, 2t + 1, 2t + 8, 2t + 9 of a step hold its columns 4t .. 4t + 3 (as K's).
    qa[kk][0] = pair(kk * 16 + (kFp8 ? 2 * c2 : c2));
    qa[kk][1] = pair(kk * 16 + (kFp8 ? 2 * c2 + 2 : c2 + 8));
  }
}

// A tile's K rows, then V rows, into `stage` by cp.async (not committed): lanes l and l + 16 hold
// in `off` the element offset of key l's rows; keys from `valid_keys` on are zero-filled.
template <typename T, int D, bool kFp8>
__device__ __forceinline__ void DecodeMmaCopyTile(unsigned char* stage, const void* k_cache, const void* v_cache,
                                                  int64_t off, int valid_keys, int lane) {
  constexpr int kKeys = kDecodeMmaTileKeys;
  constexpr int kRawChunks = kFp8 ? D / 16 : D / 8;  // 16-byte chunks of a cache row
#pragma unroll
  for (int i = 0; i < kKeys * kRawChunks / 32; ++i) {
    const int piece = i * 32 + lane, row = piece / kRawChunks, c = piece % kRawChunks;
    const int64_t orow = __shfl_sync(0xffffffffu, off, row);
    const bool valid = row < valid_keys;
    if constexpr (kFp8) {
      const uint8_t* kc = static_cast<const uint8_t*>(k_cache);
      const uint8_t* vc = static_cast<const uint8_t*>(v_cache);
      uint8_t* ks = stage;
      uint8_t* vs = stage + kKeys * D;
      CpAsync16(ks + SwzBytes<D>(row, c), kc + orow + c * 16, valid);
      CpAsync16(vs + SwzBytes<D>(row, c), vc + orow + c * 16, valid);
    } else {
      const T* kc = static_cast<const T*>(k_cache);
      const T* vc = static_cast<const T*>(v_cache);
      T* ks = reinterpret_cast<T*>(stage);
      T* vs = ks + kKeys * D;
      CpAsync16(ks + Swz<D>(row, c), kc + orow + c * 8, valid);
      CpAsync16(vs + Swz<D>(row, c), vc + orow + c * 8, valid);
    }
  }
}

// One warp's online-softmax state for its query heads: head g = lane / 4 (its quad agrees on m; l
// is the lane's share), o[dt][e] = O[g][dt * 8 + 2 * (lane % 4) + e] (FP8: see DecodeMmaTile).
// o[dt][2..3] are the MMAs' padding rows g + 8 (their A rows are zero, so they stay zero): kept as
// state so that each O MMA accumulates in place. With two-register accumulators every tile spent
// ~90 register moves and zeroings on rebuilding the MMAs' four-register operands (SASS of the FP8
// loop: 77 moves and 16 zeroing pairs against 32 MMAs; benchmarks/RESULTS.md, twentieth session).
//
// kOT (an FP8 cache): O is kept transposed instead, Oᵀ += Vᵀ Pᵀ with head_dim in the MMA's 16 rows
// and the heads its 8 columns (Pᵀ as the B operand is P's A registers as they are): o[c][e] for
// the 16 dimensions of chunk c, e = 0 / 1 dimension 16c + 2g of heads 2t / 2t + 1, e = 2 / 3
// dimension 16c + 2g + 1 of the same heads. Half the accumulators (no padding rows: 32 registers
// a thread at D = 128 instead of 64) and half the MMAs.
template <int D, bool kOT = false>
struct DecodeMmaState {
  static constexpr int kOTiles = kOT ? D / 16 : D / 8;
  float m, l;
  float o[kOTiles][4];
  __device__ __forceinline__ void Reset() {
    m = -INFINITY;
    l = 0.0f;
#pragma unroll
    for (int i = 0; i < kOTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  }
};

// The staged tile of keys k0 .. k0 + 15 (those >= end masked) into the state: S = Q K^T, the online
// softmax (log2 domain, `scale` folded in), O += P V.
template <typename T, int D, bool kFp8, bool kOT>
__device__ __forceinline__ void DecodeMmaTile(const unsigned char* stage, const uint32_t (&qa)[D / 16][2],
                                              int k0, int end, float scale, DecodeMmaState<D, kOT>& st,
                                              int lane) {
  static_assert(!kOT || kFp8, "the transposed O: an FP8 cache");
  using OT = DecodeMmaOperand<T, kFp8>;
  constexpr int kKeys = kDecodeMmaTileKeys;
  constexpr int kTilesD = D / 8, kStepsD = D / 16;
  // S = Q K^T: 16 keys in two n8 tiles (ldmatrix matrix mi: keys (mi & 1) * 8 .., column step
  // kk + (mi >> 1); FP8: a 16-byte chunk of bytes is one 16-column step).
  float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  const int mi = lane >> 3;
  if constexpr (kFp8) {
#pragma unroll
    for (int kk = 0; kk < kStepsD; kk += 2) {
      uint32_t r[4];
      LdMatrixX4(r, stage + SwzBytes<D>((mi & 1) * 8 + (lane & 7), kk + (mi >> 1)));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t a[4] = {qa[kk + h][0], 0u, qa[kk + h][1], 0u};
        MmaTraits<OT>::Mma(s[0], a, Fp8x2ToHalf2Bits(r[2 * h]), Fp8x2ToHalf2Bits(r[2 * h] >> 16));
        MmaTraits<OT>::Mma(s[1], a, Fp8x2ToHalf2Bits(r[2 * h + 1]), Fp8x2ToHalf2Bits(r[2 * h + 1] >> 16));
      }
    }
  } else {
    const OT* k_s = reinterpret_cast<const OT*>(stage);
#pragma unroll
    for (int kk = 0; kk < kStepsD; ++kk) {
      uint32_t b[4];
      LdMatrixX4(b, k_s + Swz<D>((mi >> 1) * 8 + (lane & 7), kk * 2 + (mi & 1)));
      const uint32_t a[4] = {qa[kk][0], 0u, qa[kk][1], 0u};
      MmaTraits<OT>::Mma(s[0], a, b[0], b[1]);
      MmaTraits<OT>::Mma(s[1], a, b[2], b[3]);
    }
  }
  // Online softmax for head g over this tile's keys k0 + nt * 8 + 2 * (lane % 4) + e.
  float mx = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (k0 + nt * 8 + 2 * (lane & 3) + e >= end) s[nt][e] = -INFINITY;
      mx = fmaxf(mx, s[nt][e]);
    }
  }
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
  mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
  const float m_new = fmaxf(st.m, mx * scale);
  const float m_use = m_new == -INFINITY ? 0.0f : m_new;
  const float corr = FastExp2(st.m - m_use);
  st.m = m_new;
  float pr[2][2];
#pragma unroll
  for (int nt = 0; nt < 2; ++nt) {
    pr[nt][0] = FastExp2(fmaf(s[nt][0], scale, -m_use));
    pr[nt][1] = FastExp2(fmaf(s[nt][1], scale, -m_use));
  }
  st.l = st.l * corr + (pr[0][0] + pr[0][1] + pr[1][0] + pr[1][1]);
  if (__any_sync(0xffffffffu, corr != 1.0f)) {
    if constexpr (kOT) {  // this lane's heads 2t and 2t + 1: their quads' factors
      const int t = lane & 3;
      const float corr_a = __shfl_sync(0xffffffffu, corr, 8 * t),
                  corr_b = __shfl_sync(0xffffffffu, corr, 8 * t + 4);
#pragma unroll
      for (int i = 0; i < DecodeMmaState<D, kOT>::kOTiles; ++i) {
        st.o[i][0] *= corr_a;
        st.o[i][1] *= corr_b;
        st.o[i][2] *= corr_a;
        st.o[i][3] *= corr_b;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kTilesD; ++i) {
        st.o[i][0] *= corr;
        st.o[i][1] *= corr;
      }
    }
  }
  // O += P V: P's fragments are the A operand (keys 2t.. of n-tile 0 in a0, of n-tile 1 in a2).
  const uint32_t a[4] = {MmaTraits<OT>::Pack(pr[0][0], pr[0][1]), 0u, MmaTraits<OT>::Pack(pr[1][0], pr[1][1]), 0u};
  auto mma_o = [&](int nt, uint32_t b0, uint32_t b1) { MmaTraits<OT>::Mma(st.o[nt], a, b0, b1); };
  if constexpr (kFp8) {
    // Matrices: keys 0-7 and 8-15 of chunk cc, then of chunk cc + 1. Transposed, a lane holds
    // bytes (2g, 2g + 1) of keys 2t and 2t + 1; the permute pairs the keys of column 2g in the
    // low half and of 2g + 1 in the high half: lo those of keys 0-7, hi of keys 8-15.
    const uint8_t* v_s = stage + kKeys * D;
#pragma unroll
    for (int cc = 0; cc < D / 16; cc += 2) {
      uint32_t r[4];
      LdMatrixX4Trans(r, v_s + SwzBytes<D>((mi & 1) * 8 + (lane & 7), cc + (mi >> 1)));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t lo = __byte_perm(r[2 * h], 0u, 0x3120), hi = __byte_perm(r[2 * h + 1], 0u, 0x3120);
        if constexpr (kOT) {
          // Oᵀ += Vᵀ Pᵀ: Vᵀ's A fragment with row g standing for dimension 2g of the chunk and row
          // g + 8 for 2g + 1; Pᵀ's B fragment (keys 2t.. and 2t + 8.. of head g) is P's A
          // registers a[0] and a[2].
          const uint32_t va[4] = {Fp8x2ToHalf2Bits(lo), Fp8x2ToHalf2Bits(lo >> 16), Fp8x2ToHalf2Bits(hi),
                                  Fp8x2ToHalf2Bits(hi >> 16)};
          MmaTraits<OT>::Mma(st.o[cc + h], va, a[0], a[2]);
        } else {  // V's B fragments: n8 tiles 2(cc + h) (even columns) and 2(cc + h) + 1 (odd)
          mma_o(2 * (cc + h), Fp8x2ToHalf2Bits(lo), Fp8x2ToHalf2Bits(hi));
          mma_o(2 * (cc + h) + 1, Fp8x2ToHalf2Bits(lo >> 16), Fp8x2ToHalf2Bits(hi >> 16));
        }
      }
    }
  } else {
    const OT* v_s = reinterpret_cast<const OT*>(stage) + kKeys * D;
#pragma unroll
    for (int dt2 = 0; dt2 < kTilesD / 2; ++dt2) {
      uint32_t b[4];
      LdMatrixX4Trans(b, v_s + Swz<D>((mi & 1) * 8 + (lane & 7), dt2 * 2 + (mi >> 1)));
      mma_o(2 * dt2, b[0], b[1]);
      mma_o(2 * dt2 + 1, b[2], b[3]);
    }
  }
}

// grid: (num_kv_heads * head_tiles, num_tokens, splits) (LocateDecodeSlice); block: kDecodeMmaThreads. Block
// (t, kvh, tile, z) as in AttentionDecodeKernel (same split and merge): token t == sequence t, the G query
// heads kvh * group + tile * G + [0, G), slice z of the visible keys.
// kOT (an FP8 cache): O transposed (DecodeMmaState), held to 128 registers so that four blocks
// share an SM (138 unbounded, no spills either way; 162 with O untransposed: three). 8B step on an
// H200, FP8 weights + FP8 KV, batch 128 / 256: 6.14 / 10.04 ms with O untransposed, 6.08 / 9.92
// transposed at three blocks, 5.91 / 9.64 at four; level at 8-64 (benchmarks/RESULTS.md).
template <typename T, int G, int D, bool kFp8, bool kOT>
__global__ void __launch_bounds__(kDecodeMmaThreads, kOT ? 4 : 2)
    AttentionDecodeMmaKernel(PagedAttentionParams p, DecodeSplit split) {
  static_assert(sizeof(T) == 2 && (D == 64 || D == 128) && G <= 8);
  using Smem = DecodeMmaSmem<T, G, D, kFp8>;
  constexpr int kStages = Smem::kStages;
  constexpr int kKeys = kDecodeMmaTileKeys;
  AllowDependentLaunch();
  extern __shared__ __align__(128) unsigned char decode_mma_smem[];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  unsigned char* const warp_smem = decode_mma_smem + warp * Smem::kWarpBytes;
  const DecodeSlice slice = LocateDecodeSlice<G>(p, split);
  if (slice.z >= slice.splits) return;
  const int64_t t = slice.t;
  const int kvh = slice.kvh, h0 = slice.h0, rows = slice.rows, start = slice.start, end = slice.end;
  const int32_t* table = slice.table;
  const int n_tiles = (end - start + kKeys - 1) / kKeys;  // of the slice; this warp takes every W-th
  const int page_shift = (p.block_size & (p.block_size - 1)) == 0 ? __ffs(p.block_size) - 1 : -1;
  const int my_tiles = n_tiles > warp ? (n_tiles - warp + kDecodeMmaWarps - 1) / kDecodeMmaWarps : 0;
  // Lanes l and l + 16 look up key l of a tile: its block-table entry (a global load), and from it
  // the element offset of its row. The two are kept apart so that a tile's entry is loaded an
  // iteration before its offset is needed: a load consumed at once stalled the warp on the table
  // read every tile (Nsight on an H100: 28% of the loop's stall samples), and the prologue's
  // lookups, one after the other, delayed the first copies.
  auto tile_k0 = [&](int j) { return start + (warp + j * kDecodeMmaWarps) * kKeys; };  // tile j's first key
  auto tile_slot = [&](int j) {
    const int key = tile_k0(j) + (lane & (kKeys - 1));
    return page_shift >= 0 ? LocateKey<true>(key, p.block_size, page_shift) : LocateKey<false>(key, p.block_size, 0);
  };
  auto tile_page = [&](int j) -> int {  // clamped into the table: keys past the context are never read
    return j < my_tiles ? table[min(tile_slot(j).block, p.max_blocks_per_seq - 1)] : 0;
  };
  auto tile_offset = [&](int j, int page) -> int64_t {
    return PagedRowOffsetInPage(page, tile_slot(j).slot, kvh, p.num_kv_heads, p.block_size, D);
  };
  int first_pages[kStages];  // tiles 0 .. kStages - 1, loaded together (the table is no kernel's output)
#pragma unroll
  for (int j = 0; j < kStages; ++j) first_pages[j] = tile_page(j);

  // Tile j of this warp into stage j % kStages (rows past `end`: zeros), one group a tile, empty
  // past the warp's last.
  auto issue_tile = [&](int j, int64_t off) {
    if (j < my_tiles)
      DecodeMmaCopyTile<T, D, kFp8>(warp_smem + (j % kStages) * Smem::kTileBytes, p.k_cache, p.v_cache, off,
                                    end - tile_k0(j), lane);
    CpAsyncCommit();
  };
  // The first tiles whose keys all precede the step's own key (ctx - 1, which the predecessor,
  // QkvRope, writes) have been in the cache since earlier steps: they are copied before the
  // dependency wait, so that under programmatic launch the block's first loads overlap the kernels
  // before it instead of following them (the same order of copy groups either way).
  int issued = 0;
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    const int last_key = min(tile_k0(j) + kKeys, end) - 1;
    if (issued == j && last_key < slice.ctx - 1) {
      issue_tile(j, tile_offset(j, first_pages[j]));
      ++issued;
    }
  }
  GridDependencyWait();

  // Q, kept in registers for the whole loop.
  uint32_t qa[D / 16][2];
  DecodeMmaLoadQ<T, D, kFp8>(qa, static_cast<const T*>(p.q) + (t * p.num_heads + h0) * static_cast<int64_t>(D), rows,
                             lane);
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j)
    if (j >= issued) issue_tile(j, tile_offset(j, first_pages[j]));
  // The entries of the next two tiles to issue: tile j + kStages - 1 (issued in iteration j) and
  // the one after (loaded in iteration j, used in j + 1).
  int page_now = first_pages[kStages - 1], page_next = tile_page(kStages);

  const float scale = p.scale * kLog2e * (kFp8 ? p.k_scale : 1.0f);
  DecodeMmaState<D, kOT> st;
  st.Reset();
  for (int j = 0; j < my_tiles; ++j) {
    CpAsyncWait<kStages - 2>();  // tile j has landed (this lane's copies)
    __syncwarp();                // ... and every lane's
    // Refill: tile j + kStages - 1 into the stage tile j - 1 used (done with at the last __syncwarp).
    issue_tile(j + kStages - 1, tile_offset(j + kStages - 1, page_now));
    page_now = page_next;
    page_next = tile_page(j + kStages + 1);
    DecodeMmaTile<T, D, kFp8, kOT>(warp_smem + (j % kStages) * Smem::kTileBytes, qa, tile_k0(j), end, scale,
                                   st, lane);
    __syncwarp();  // every lane is done with this stage before it is refilled
  }
  CpAsyncWait<0>();
  __syncthreads();  // the stages are done with: the merge area aliases them

  // This warp's state for its heads into the merge area.
  float* m_w = reinterpret_cast<float*>(decode_mma_smem);
  float* l_w = m_w + kDecodeMmaWarps * G;
  float* acc_w = l_w + kDecodeMmaWarps * G;
  {
    const int g = lane >> 2;
    float l = st.l;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    if (g < G) {
      if ((lane & 3) == 0) {
        m_w[warp * G + g] = st.m;
        l_w[warp * G + g] = l;
      }
      float* acc = acc_w + (warp * G + g) * D;
      const int c2 = 2 * (lane & 3);
      // Transposed (kOT), this lane holds dimensions 16c + 2g, + 1 of heads 2t and 2t + 1: below.
      if constexpr (!kOT && kFp8) {
        // n8 tiles 2cc and 2cc + 1 hold columns 16cc + 2n and 16cc + 2n + 1: this lane's four are
        // 16cc + 4t .. 16cc + 4t + 3.
#pragma unroll
        for (int cc = 0; cc < D / 16; ++cc)
          *reinterpret_cast<float4*>(acc + cc * 16 + 2 * c2) =
              make_float4(st.o[2 * cc][0], st.o[2 * cc + 1][0], st.o[2 * cc][1], st.o[2 * cc + 1][1]);
      } else if constexpr (!kOT) {
#pragma unroll
        for (int dt = 0; dt < D / 8; ++dt)
          *reinterpret_cast<float2*>(acc + dt * 8 + c2) = make_float2(st.o[dt][0], st.o[dt][1]);
      }
    }
    if constexpr (kOT) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int head = 2 * (lane & 3) + e;
        if (head < G) {
          float* acc = acc_w + (warp * G + head) * D + 2 * g;
#pragma unroll
          for (int c = 0; c < D / 16; ++c)
            *reinterpret_cast<float2*>(acc + 16 * c) = make_float2(st.o[c][e], st.o[c][e + 2]);
        }
      }
    }
  }
  __syncthreads();
  MergeDecodeWarps<T, kDecodeMmaWarps, G, D, kDecodeMmaThreads, kFp8>(p, split, t, kvh, slice.tile, slice.z, h0,
                                                                      rows, slice.splits, m_w, l_w, acc_w);
}

}  // namespace llm::cuda::attention
