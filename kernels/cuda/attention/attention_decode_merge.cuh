// Internal: the end of both decode kernels (attention_decode.cuh, attention_decode_mma.cuh). Each
// warp leaves its online-softmax state for the block's G query heads in shared memory: running max
// m (log2 units, scale folded in), sum l and unnormalized output acc; this merges the warps and,
// with a split context, the slices.
//
// With a split, each block's merged result is a partial, and the last slice of a (token, KV head)
// to finish merges them all (an arrival counter instead of a combine kernel).
#pragma once

#include "kernels/cuda/attention/attention_common.cuh"

namespace llm::cuda::attention {

// What a decode block (t, kvh, tile, z) owns: grid (num_kv_heads * head_tiles, num_tokens, splits)
// (DecodeSplit::heads_fastest; else its first two dimensions swapped), token t == sequence t, the `rows` (<=
// G) query heads from h0, and slice z of its visible keys [start, end). A sequence uses only the slices its
// own context needs (`splits` of them; a CUDA graph is captured for the longest context it serves): blocks
// with z >= splits have no keys.
struct DecodeSlice {
  int64_t t;
  int kvh, tile, z, h0, rows;
  int ctx;                // the sequence's context length
  const int32_t* table;   // its block-table row
  int start, end, splits;
};

// Reads the sequence's metadata (the host wrote it: callable before the grid-dependency wait).
template <int G>
__device__ __forceinline__ DecodeSlice LocateDecodeSlice(const PagedAttentionParams& p, const DecodeSplit& split) {
  DecodeSlice s;
  const unsigned row = split.heads_fastest ? blockIdx.x : blockIdx.y;
  s.t = split.heads_fastest ? blockIdx.y : blockIdx.x;
  s.kvh = row / split.head_tiles;
  s.tile = row % split.head_tiles;
  s.z = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  s.h0 = s.kvh * group + s.tile * G;
  s.rows = min(G, group - s.tile * G);
  s.ctx = p.context_lens[s.t];
  s.table = p.block_tables + s.t * p.max_blocks_per_seq;
  const int first = p.sliding_window > 0 ? max(0, s.ctx - p.sliding_window) : 0;
  int chunk = s.ctx - first;
  s.splits = 1;
  if (split.splits > 1) {
    // As many slices as whole min_chunks fit (a context just past a multiple of min_chunk is not
    // given a slice of a few keys, whose partials and merge cost more than the keys: 129 keys in
    // one slice, not 128 + 1), the keys spread evenly over them in multiples of 32.
    const int keys = s.ctx - first;
    const int n = max(1, min(split.splits, keys / split.min_chunk));
    chunk = max(32, ((keys + n - 1) / n + 31) / 32 * 32);
    s.splits = max(1, (keys + chunk - 1) / chunk);
  }
  s.start = first + s.z * chunk;
  s.end = min(s.ctx, s.start + chunk);
  return s;
}

// Shared memory of the merge (floats): m [W][G], l [W][G], acc [W][G][D], written by the warps
// before the call (and synchronized). The slices' merge reuses acc as scratch (2 x G x splits
// floats), which bounds the slices a launch may use: DecodeMergeMaxSplits.
template <int W, int G, int D>
struct DecodeMergeArea {
  static constexpr size_t kBytes = sizeof(float) * W * G * (D + 2);
};
template <int W, int D>
constexpr int DecodeMergeMaxSplits() {
  return W * D / 2;  // 2 x G x splits floats within W x G x D
}

// Block (t, kvh, tile, z) of the decode grid: `rows` query heads from h0, slice z of `splits`.
// Every thread of the block (kThreads) calls it after the barrier that follows the warps' stores.
template <typename T, int W, int G, int D, int kThreads, bool kFp8>
__device__ __forceinline__ void MergeDecodeWarps(const PagedAttentionParams& p, const DecodeSplit& split,
                                                 int64_t t, int kvh, int tile, int z, int h0, int rows,
                                                 int splits, float* m_w, float* l_w, float* acc_w) {
  const int tid = threadIdx.x;
  for (int i = tid; i < rows * D; i += kThreads) {
    const int r = i / D, c = i % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; ++w) mx = fmaxf(mx, m_w[w * G + r]);
    const float m_use = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float wt = exp2f(m_w[w * G + r] - m_use);
      sum += l_w[w * G + r] * wt;
      o += acc_w[(w * G + r) * D + c] * wt;
    }
    if constexpr (kFp8) o *= p.v_scale;
    const int64_t qh = t * p.num_heads + h0 + r;
    if (splits == 1) {
      static_cast<T*>(p.out)[qh * D + c] = FromFloat<T>(sum > 0.0f ? o / sum : 0.0f);
    } else {
      split.part_acc[(qh * split.splits + z) * D + c] = o;
      if (c == 0) split.part_ml[qh * split.splits + z] = make_float2(mx, sum);
    }
  }
  if (splits == 1) return;

  // Split: count this slice in; the last one to arrive merges every slice's partials. The
  // block's partial stores are ordered before its count by the barrier and thread 0's fence (the
  // release), and the merging block's reads after the count by its fence (the acquire); it reads
  // them from L2 (__ldcg), where the other SMs' stores are.
  __syncthreads();
  __shared__ bool last;
  if (tid == 0) {
    __threadfence();
    unsigned* arrivals = split.arrivals + (t * p.num_kv_heads + kvh) * split.head_tiles + tile;
    last = atomicAdd(arrivals, 1u) == static_cast<unsigned>(splits - 1);
    if (last) {
      *arrivals = 0u;  // every slice has arrived: ready for the next call
      __threadfence();
    }
  }
  __syncthreads();
  if (!last) return;
  // Each slice's weight for each head first (its max and sum, into the merge area), then the
  // output columns.
  float* mz = acc_w;               // [rows][splits]
  float* wt = acc_w + G * splits;  // same
  for (int i = tid; i < rows * splits; i += kThreads) {
    const int r = i / splits, zz = i % splits;
    const float2 part = __ldcg(&split.part_ml[(t * p.num_heads + h0 + r) * split.splits + zz]);
    mz[i] = part.x;
    wt[i] = part.y;
  }
  __syncthreads();
  if (tid < rows) {
    float mx = -INFINITY;
    for (int zz = 0; zz < splits; ++zz) mx = fmaxf(mx, mz[tid * splits + zz]);
    const float m_use = mx == -INFINITY ? 0.0f : mx;
    float sum = 0.0f;
    for (int zz = 0; zz < splits; ++zz) {
      const float e = exp2f(mz[tid * splits + zz] - m_use);
      mz[tid * splits + zz] = e;
      sum += wt[tid * splits + zz] * e;
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int zz = 0; zz < splits; ++zz) wt[tid * splits + zz] = mz[tid * splits + zz] * inv;
  }
  __syncthreads();
  for (int i = tid; i < rows * D; i += kThreads) {
    const int r = i / D, c = i % D;
    const int64_t qh = t * p.num_heads + h0 + r;
    float o = 0.0f;
    for (int zz = 0; zz < splits; ++zz) {
      const float w = wt[r * splits + zz];
      if (w > 0.0f) o += __ldcg(&split.part_acc[(qh * split.splits + zz) * D + c]) * w;
    }
    static_cast<T*>(p.out)[qh * D + c] = FromFloat<T>(o);
  }
}

}  // namespace llm::cuda::attention
