// Internal: the decode attention kernel for 16-bit caches with head_dim 64 or 128 (the shapes of
// the Llama/Qwen/Mistral families), one query token per sequence.
//
// At decode the work per (token, KV head) is small (a few hundred keys) and the call is bound by
// latency, not bandwidth: the SIMT kernel's 64-key tiles on 4 warps take several microseconds
// each, one after the other. Here every warp owns 32 keys at a time, one per lane, and works
// through them on its own, so a block of 8 warps covers 256 keys in the time of one group:
//   scores  lane j computes q · K[key j] for the G query heads of the block (its key's row in
//           registers, q broadcast from shared memory);
//   softmax online across the warp's groups (warp max/sum, the running max rescales the rest);
//   P·V     lane c accumulates output columns [c * D/32, (c + 1) * D/32) over the 32 keys (V rows
//           read coalesced, each key's probability shuffled from its lane).
// The K rows of a group are staged in shared memory with coalesced cp.async copies (a lane reading
// its own row straight from global memory would make every load touch 32 lines); its V rows are
// loaded into registers at the same time, before the scores are computed (or, when the blocks
// alone fill the GPU, staged like K once the scores are done: the kVSmem variant below).
// Then the warps' (max, sum, output) are merged in shared memory. With a split context, each
// block's merged result is a partial, and the last slice of a (token, KV head) to finish merges
// them all (an arrival counter instead of a combine kernel). A sequence uses only the slices its
// own context needs: a CUDA graph is captured for the longest context it serves, and a short
// context should not pay for the split that a long one needs.
#pragma once

#include <type_traits>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attention_decode_merge.cuh"
#include "kernels/cuda/common/fp8.cuh"

namespace llm::cuda::attention {

constexpr int kDecodeWarps = 8;
constexpr int kDecodeThreads = 32 * kDecodeWarps;
constexpr int kDecodeKeysPerBlockStep = 32 * kDecodeWarps;
// Slices per sequence the in-kernel merge handles (at head_dim 64, the smaller merge area).
constexpr int kDecodeMaxSplits = DecodeMergeMaxSplits<kDecodeWarps, 64>();

// Dynamic shared memory: q_s [G][D] floats (scaled by scale * log2 e), then either the warps' K
// stages (T [W][32][D + 8]: each warp's 32 rows, padded so that a lane reading its own row from
// shared memory is free of bank conflicts) or, after the loop, the per-warp results (floats:
// m [W][G], l [W][G], acc [W][G][D]).
template <typename T, int G, int D>
struct DecodeSmem {
  static constexpr int kRowPitch = D + 8;  // elements
  static constexpr size_t kStageBytes = sizeof(T) * kDecodeWarps * 32 * kRowPitch;
  static constexpr size_t kMergeBytes = DecodeMergeArea<kDecodeWarps, G, D>::kBytes;
  static constexpr size_t kBytes =
      sizeof(float) * G * D + (kStageBytes > kMergeBytes ? kStageBytes : kMergeBytes);
};

// One lane's share of a V row: D / 32 elements of 2 bytes (of 1 byte in an FP8 cache: ColVecFp8).
template <int D>
using DecodeColVec = std::conditional_t<D == 128, uint2, uint32_t>;
template <int D>
using DecodeColVecFp8 = std::conditional_t<D == 128, uint32_t, uint16_t>;

// grid: (num_kv_heads * head_tiles, num_tokens, splits) (LocateDecodeSlice); block: kDecodeThreads. Block (t,
// kvh, tile, z) as in AttentionSimtKernel: token t == sequence t (one query token each), the G query heads
// kvh * group + tile * G + [0, G), slice z of the visible keys.
// kVSmem: V rows go through the warp's shared-memory stage too (after the K rows, into the same
// place) instead of registers: the V latency is no longer hidden behind the scores, but the
// kernel fits 128 registers and two blocks per SM, which is what counts when the grid alone
// fills the GPU (large batches).
//
// kFp8: the cache holds E4M3 bytes (PagedAttentionParams::fp8_cache). The same steps with byte
// rows: a row's 16-byte pieces hold 16 elements (half as many copies), staged rows are D + 16
// bytes apart, V columns are D / 32 bytes a lane, and elements are widened to float where they
// are used; k_scale joins the query's scale and v_scale the output's. The 16-bit code is kept
// exactly as it was (its register allocation, spill-free at 128 registers, depends on it).
template <typename T, int G, int D, bool kVSmem, bool kFp8 = false>
__global__ void __launch_bounds__(kDecodeThreads, kVSmem ? 2 : 1)
    AttentionDecodeKernel(PagedAttentionParams p, DecodeSplit split) {
  static_assert(sizeof(T) == 2 && (D == 64 || D == 128));
  constexpr int kCols = D / 32;
  constexpr int kVec = kFp8 ? 16 : 8;  // cache elements per 16-byte load
  constexpr int kRowVecs = D / kVec;
  constexpr int kFp8Pitch = D + 16;  // bytes between staged FP8 rows
  using ColVec = std::conditional_t<kFp8, DecodeColVecFp8<D>, DecodeColVec<D>>;
  AllowDependentLaunch();
  using Smem = DecodeSmem<T, G, D>;
  extern __shared__ __align__(16) float decode_smem[];
  float* q_s = decode_smem;
  float* m_w = q_s + G * D;  // after the loop (aliases the K stages)
  float* l_w = m_w + kDecodeWarps * G;
  float* acc_w = l_w + kDecodeWarps * G;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  T* const k_stage = reinterpret_cast<T*>(q_s + G * D) + warp * 32 * Smem::kRowPitch;
  uint8_t* const k_stage8 = reinterpret_cast<uint8_t*>(q_s + G * D) + warp * 32 * kFp8Pitch;
  const DecodeSlice slice = LocateDecodeSlice<G>(p, split);
  if (slice.z >= slice.splits) return;
  const int64_t t = slice.t;
  const int kvh = slice.kvh, tile = slice.tile, z = slice.z, h0 = slice.h0, rows = slice.rows;
  const int ctx = slice.ctx, start = slice.start;
  const int32_t* table = slice.table;
  // The slice count is kept in shared memory, not a register, through the key loop: the
  // 128-register variant has none to spare.
  __shared__ int seq_splits;
  if (tid == 0) seq_splits = slice.splits;
  const T* kc = static_cast<const T*>(p.k_cache);
  const T* vc = static_cast<const T*>(p.v_cache);
  const uint8_t* kc8 = static_cast<const uint8_t*>(p.k_cache);
  const uint8_t* vc8 = static_cast<const uint8_t*>(p.v_cache);
  // Element offset of key `key`'s row in the caches (keys past the context are never read).
  auto row_offset = [&](int key) -> int64_t {
    const PagedKeySlot at = (p.block_size & (p.block_size - 1)) == 0
                                ? LocateKey<true>(key, p.block_size, __ffs(p.block_size) - 1)
                                : LocateKey<false>(key, p.block_size, 0);
    return PagedRowOffset(table, at, kvh, p.num_kv_heads, p.block_size, p.max_blocks_per_seq - 1, D);
  };
  int64_t next_off = row_offset(start + warp * 32 + lane);
  const int end = slice.end;
  GridDependencyWait();

  const float qscale = kFp8 ? p.scale * kLog2e * p.k_scale : p.scale * kLog2e;
  const T* q = static_cast<const T*>(p.q) + (t * p.num_heads + h0) * static_cast<int64_t>(D);
  for (int i = tid; i < G * D; i += kDecodeThreads) q_s[i] = i / D < rows ? ToFloat(q[i]) * qscale : 0.0f;
  __syncthreads();

  float m[G], l[G], acc[G][kCols];
#pragma unroll
  for (int r = 0; r < G; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[r][c] = 0.0f;
  }
  for (int k0 = start + warp * 32; k0 < end; k0 += kDecodeKeysPerBlockStep) {
    const int key = k0 + lane;
    const bool valid = key < end;
    const int64_t off = next_off;
    if (k0 + kDecodeKeysPerBlockStep < end) next_off = row_offset(key + kDecodeKeysPerBlockStep);
    // The group's 32 rows of `cache` into this warp's stage with coalesced 16-byte copies (lanes
    // cover consecutive pieces of 32 / kRowVecs rows per instruction; rows past the end: zeros).
    auto stage_rows = [&](const T* cache) {
#pragma unroll
      for (int i = 0; i < kRowVecs; ++i) {
        const int piece = i * 32 + lane, row = piece / kRowVecs, col = (piece % kRowVecs) * kVec;
        const int64_t orow = __shfl_sync(0xffffffffu, off, row);
        CpAsync16(k_stage + row * Smem::kRowPitch + col, cache + orow + col, k0 + row < end);
      }
      CpAsyncCommit();
    };
    auto stage_rows8 = [&](const uint8_t* cache) {
#pragma unroll
      for (int i = 0; i < kRowVecs; ++i) {
        const int piece = i * 32 + lane, row = piece / kRowVecs, col = (piece % kRowVecs) * kVec;
        const int64_t orow = __shfl_sync(0xffffffffu, off, row);
        CpAsync16(k_stage8 + row * kFp8Pitch + col, cache + orow + col, k0 + row < end);
      }
      CpAsyncCommit();
    };
    // K first: a lane then reads its own row from shared memory.
    if constexpr (kFp8) stage_rows8(kc8);
    else stage_rows(kc);
    // V: this lane's columns of the group's 32 rows (zeros past the end: 0 * garbage could be NaN).
    ColVec v[kVSmem ? 1 : 32];
    if constexpr (!kVSmem) {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int64_t oj = __shfl_sync(0xffffffffu, off, j);
        if (k0 + j < end) {
          if constexpr (kFp8) v[j] = *reinterpret_cast<const ColVec*>(vc8 + oj + lane * kCols);
          else v[j] = *reinterpret_cast<const ColVec*>(vc + oj + lane * kCols);
        } else {
          v[j] = ColVec{};
        }
      }
    }
    // K: this lane's key row, then the G scores.
    float s[G];
#pragma unroll
    for (int r = 0; r < G; ++r) s[r] = 0.0f;
    CpAsyncWait<0>();
    __syncwarp();
    if (kFp8 && valid) {
      // E4M3: 16 elements a 16-byte piece of the lane's staged row.
#pragma unroll(kVSmem ? 2 : kRowVecs)
      for (int i = 0; i < kRowVecs; ++i) {
        const uint4 kv = *reinterpret_cast<const uint4*>(k_stage8 + lane * kFp8Pitch + i * 16);
        float kf[16];
        Fp8x16ToFloat(kv, kf);
#pragma unroll
        for (int r = 0; r < G; ++r) {
#pragma unroll
          for (int e8 = 0; e8 < 16; e8 += 8) {
            const float4 qa = *reinterpret_cast<const float4*>(q_s + r * D + i * 16 + e8);
            const float4 qb = *reinterpret_cast<const float4*>(q_s + r * D + i * 16 + e8 + 4);
            s[r] += qa.x * kf[e8] + qa.y * kf[e8 + 1] + qa.z * kf[e8 + 2] + qa.w * kf[e8 + 3] + qb.x * kf[e8 + 4] +
                    qb.y * kf[e8 + 5] + qb.z * kf[e8 + 6] + qb.w * kf[e8 + 7];
          }
        }
      }
    } else if (!kFp8 && valid) {
      // The row from shared memory (all of it in registers first, or, in the 128-register
      // variant, a few vectors at a time).
      uint4 kr[kVSmem ? 1 : kRowVecs];
      if constexpr (!kVSmem) {
#pragma unroll
        for (int i = 0; i < kRowVecs; ++i)
          kr[i] = *reinterpret_cast<const uint4*>(k_stage + lane * Smem::kRowPitch + i * kVec);
      }
#pragma unroll(kVSmem ? 4 : kRowVecs)
      for (int i = 0; i < kRowVecs; ++i) {
        uint4 kv;
        if constexpr (kVSmem) kv = *reinterpret_cast<const uint4*>(k_stage + lane * Smem::kRowPitch + i * kVec);
        else kv = kr[i];
        const T* ke = reinterpret_cast<const T*>(&kv);
        float kf[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) kf[e] = ToFloat(ke[e]);
#pragma unroll
        for (int r = 0; r < G; ++r) {
          const float4 qa = *reinterpret_cast<const float4*>(q_s + r * D + i * kVec);
          const float4 qb = *reinterpret_cast<const float4*>(q_s + r * D + i * kVec + 4);
          s[r] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] + qb.x * kf[4] + qb.y * kf[5] +
                  qb.z * kf[6] + qb.w * kf[7];
        }
      }
    }
    if constexpr (kVSmem) {
      // Every lane has its scores: the stage takes the V rows (the softmax runs meanwhile).
      __syncwarp();
      if constexpr (kFp8) stage_rows8(vc8);
      else stage_rows(vc);
    }
    // Online softmax over the group, then P·V.
    float pr[G];
#pragma unroll
    for (int r = 0; r < G; ++r) {
      const float sr = valid ? s[r] : -INFINITY;
      const float m_new = fmaxf(m[r], WarpMax(sr));
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      pr[r] = exp2f(sr - m_use);
      const float corr = exp2f(m[r] - m_use);
      l[r] = l[r] * corr + WarpSum(pr[r]);
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kCols; ++c) acc[r][c] *= corr;
    }
    if constexpr (kVSmem) {
      CpAsyncWait<0>();
      __syncwarp();
    }
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      ColVec vj;
      float vf[kCols];
      if constexpr (kFp8) {
        if constexpr (kVSmem) vj = *reinterpret_cast<const ColVec*>(k_stage8 + j * kFp8Pitch + lane * kCols);
        else vj = v[j];
        const uint8_t* ve = reinterpret_cast<const uint8_t*>(&vj);
#pragma unroll
        for (int c = 0; c < kCols; c += 2) {
          const float2 two = Fp8x2ToFloat2(static_cast<uint16_t>(ve[c] | (ve[c + 1] << 8)));
          vf[c] = two.x;
          vf[c + 1] = two.y;
        }
      } else {
        if constexpr (kVSmem) vj = *reinterpret_cast<const ColVec*>(k_stage + j * Smem::kRowPitch + lane * kCols);
        else vj = v[j];
        const T* ve = reinterpret_cast<const T*>(&vj);
#pragma unroll
        for (int c = 0; c < kCols; ++c) vf[c] = ToFloat(ve[c]);
      }
#pragma unroll
      for (int r = 0; r < G; ++r) {
        const float pj = __shfl_sync(0xffffffffu, pr[r], j);
#pragma unroll
        for (int c = 0; c < kCols; ++c) acc[r][c] += pj * vf[c];
      }
    }
    __syncwarp();  // every lane is done with the stage before the next group overwrites it
  }
  __syncthreads();  // the K stages are done with: the merge area aliases them
  const int splits = seq_splits;

  // Merge the warps: every warp's (m, l, acc) into shared memory, then one output element per
  // thread and step.
#pragma unroll
  for (int r = 0; r < G; ++r) {
    if (lane == 0) {
      m_w[warp * G + r] = m[r];
      l_w[warp * G + r] = l[r];
    }
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc_w[(warp * G + r) * D + lane * kCols + c] = acc[r][c];
  }
  __syncthreads();
  MergeDecodeWarps<T, kDecodeWarps, G, D, kDecodeThreads, kFp8>(p, split, t, kvh, tile, z, h0, rows, splits, m_w,
                                                                l_w, acc_w);
}

}  // namespace llm::cuda::attention
