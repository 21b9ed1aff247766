// Internal: the SIMT attention kernel (decode with split-K; fallback prefill) and the combine.
#pragma once

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/common/fp8.cuh"

namespace llm::cuda::attention {

constexpr int kSimtThreads = 128;
constexpr int kSimtTileN = 64;      // keys per shared-memory tile
constexpr int kSimtMaxHeadDim = 256;

// Shared memory of one block (floats unless stated):
//   q_s   [G][D]          queries pre-scaled by scale * log2(e)
//   s_s   [G][kTileN]     scores, then probabilities
//   stat  [3][G]          running max m, running sum l, this tile's correction
//   k_s   T [kStages][kTileN][D + kVec]   (padded rows: conflict-free column reads)
//   v_s   T [kStages][kTileN][D + kVec]
// With 16-bit elements in 16-byte vectors the K/V tiles are double-buffered: tile n + 1 is
// copied with cp.async while tile n is computed on, so the cache reads (and the block-table reads
// in front of them) overlap the math instead of alternating with it. (float32, a testing dtype,
// keeps one stage: two stages of 256-wide float rows would not fit in shared memory.)
template <typename T, int G, int kVec>
struct SimtSmem {
  static constexpr bool kAsync = sizeof(T) == 2 && kVec * sizeof(T) == 16;
  static constexpr int kStages = kAsync ? 2 : 1;
  __host__ __device__ static int QFloats(int d) { return (G * d + 3) / 4 * 4; }  // s_s stays 16-byte aligned
  __host__ __device__ static size_t HeadBytes(int d) {
    const size_t floats = static_cast<size_t>(QFloats(d)) + G * kSimtTileN + 3 * G;
    return (floats * sizeof(float) + 15) / 16 * 16;
  }
  __host__ __device__ static size_t TileElems(int d) { return static_cast<size_t>(kSimtTileN) * (d + kVec); }
  __host__ __device__ static size_t Bytes(int d) { return HeadBytes(d) + 2 * kStages * TileElems(d) * sizeof(T); }
};

// grid: (num_tokens, num_kv_heads * head_tiles, splits); block: kSimtThreads.
// Block (t, kvh, tile, z) computes query token t against KV head kvh for the G query heads
// kvh * group + tile * G + [0, G) over slice z of the token's visible keys.
// kFp8: the cache holds E4M3 (PagedAttentionParams::fp8_cache): tiles are widened into T as they
// are copied (synchronously), k_scale joins the query's scale and v_scale the output's.
template <typename T, int G, int kVec, bool kFp8>
__global__ void __launch_bounds__(kSimtThreads) AttentionSimtKernel(PagedAttentionParams p, int head_tiles,
                                                                    int splits, float* __restrict__ part_acc,
                                                                    float2* __restrict__ part_ml) {
  static_assert(kSimtThreads == 2 * kSimtTileN, "score phase maps 2 threads per key");
  static_assert(kSimtMaxHeadDim <= 2 * kSimtThreads, "P·V maps at most 2 columns per thread");
  using Smem = SimtSmem<T, G, kVec>;
  AllowDependentLaunch();
  GridDependencyWait();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int d = p.head_dim, dp = d + kVec;
  float* q_s = reinterpret_cast<float*>(smem_raw);
  float* s_s = q_s + Smem::QFloats(d);
  float* m_s = s_s + G * kSimtTileN;
  float* l_s = m_s + G;
  float* c_s = l_s + G;
  T* const k_base = reinterpret_cast<T*>(smem_raw + Smem::HeadBytes(d));
  T* const v_base = k_base + Smem::kStages * Smem::TileElems(d);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y / head_tiles, tile = blockIdx.y % head_tiles, z = blockIdx.z;
  const int group = p.num_heads / p.num_kv_heads;
  const int h0 = kvh * group + tile * G;
  const int rows = min(G, group - tile * G);

  const int seq = FindSequence(p.query_start, p.num_seqs, t);
  const int q_begin = p.query_start[seq], q_len = p.query_start[seq + 1] - q_begin;
  const int ctx = p.context_lens[seq];
  const int pos = ctx - q_len + static_cast<int>(t - q_begin);
  const int hi = min(pos, ctx - 1);
  const int lo = p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
  const int n_keys = max(0, hi - lo + 1);
  const int chunk = ((n_keys + splits - 1) / splits + 31) / 32 * 32;
  const int start = lo + z * chunk, end = min(hi + 1, start + chunk);
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  const T* kc = static_cast<const T*>(p.k_cache);
  const T* vc = static_cast<const T*>(p.v_cache);
  const uint8_t* kc8 = static_cast<const uint8_t*>(p.k_cache);
  const uint8_t* vc8 = static_cast<const uint8_t*>(p.v_cache);

  const float qscale = p.scale * kLog2e * (kFp8 ? p.k_scale : 1.0f);
  const float out_scale = kFp8 ? p.v_scale : 1.0f;
  const T* q = static_cast<const T*>(p.q) + (t * p.num_heads + h0) * static_cast<int64_t>(d);
  for (int i = tid; i < G * d; i += kSimtThreads) q_s[i] = i / d < rows ? ToFloat(q[i]) * qscale : 0.0f;
  if (tid < G) {
    m_s[tid] = -INFINITY;
    l_s[tid] = 0.0f;
  }
  // Output columns c = tid and tid + kThreads, every row r < G.
  float acc[2][G];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int r = 0; r < G; ++r) acc[i][r] = 0.0f;

  const int chunks_per_row = d / kVec;
  // K and V rows [n0, n0 + kTileN) into stage `stage`; rows past `end` are zeros (finite for
  // P·V). With kAsync the copies are cp.async, one commit group per tile.
  auto load_tile = [&](int n0, int stage) {
    T* ks = k_base + stage * Smem::TileElems(d);
    T* vs = v_base + stage * Smem::TileElems(d);
    for (int i = tid; i < kSimtTileN * chunks_per_row; i += kSimtThreads) {
      const int j = i / chunks_per_row, c = (i % chunks_per_row) * kVec;
      const int key = n0 + j;
      T* kd = ks + j * dp + c;
      T* vd = vs + j * dp + c;
      const bool valid = key < end;
      const int64_t off =
          valid ? PagedRowOffset(table, LocateKey<false>(key, p.block_size, 0), kvh, p.num_kv_heads, p.block_size,
                                 kNoBlockClamp, d) +
                      c
                : 0;
      if constexpr (kFp8) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          kd[e] = FromFloat<T>(valid ? Fp8ToFloat(kc8[off + e]) : 0.0f);
          vd[e] = FromFloat<T>(valid ? Fp8ToFloat(vc8[off + e]) : 0.0f);
        }
      } else if constexpr (Smem::kAsync) {
        CpAsync16(kd, kc + off, valid);
        CpAsync16(vd, vc + off, valid);
      } else if (valid) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          kd[e] = kc[off + e];
          vd[e] = vc[off + e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          kd[e] = FromFloat<T>(0.0f);
          vd[e] = FromFloat<T>(0.0f);
        }
      }
    }
    if constexpr (Smem::kAsync) CpAsyncCommit();
  };
  if constexpr (Smem::kAsync) {
    if (start < end) load_tile(start, 0);
  }
  int stage = 0;
  for (int n0 = start; n0 < end; n0 += kSimtTileN, stage ^= Smem::kStages - 1) {
    // The previous tile's readers are done (and q_s/stat are initialized): its stage may be
    // refilled.
    __syncthreads();
    if constexpr (Smem::kAsync) {
      if (n0 + kSimtTileN < end) load_tile(n0 + kSimtTileN, stage ^ 1);
      else CpAsyncCommit();  // an empty group keeps the count: the wait below is for this tile
      CpAsyncWait<1>();
    } else {
      load_tile(n0, 0);
    }
    __syncthreads();
    const T* k_s = k_base + stage * Smem::TileElems(d);
    const T* v_s = v_base + stage * Smem::TileElems(d);
    // Scores: thread -> key j = tid % kTileN, query rows r = tid / kTileN + 2i.
    {
      constexpr int kRows = (G + 1) / 2;
      const int j = tid % kSimtTileN, r0 = tid / kSimtTileN;
      float dot[kRows];
#pragma unroll
      for (int i = 0; i < kRows; ++i) dot[i] = 0.0f;
      const T* kr = k_s + j * dp;
      for (int c = 0; c < d; c += kVec) {
        T kv[kVec];
        if constexpr (kVec * sizeof(T) == 16) {
          *reinterpret_cast<uint4*>(kv) = *reinterpret_cast<const uint4*>(kr + c);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) kv[e] = kr[c + e];
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const float kf = ToFloat(kv[e]);
#pragma unroll
          for (int i = 0; i < kRows; ++i) {
            const int r = r0 + 2 * i;
            if (r < G) dot[i] += q_s[r * d + c + e] * kf;
          }
        }
      }
      const bool valid = n0 + j < end;
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const int r = r0 + 2 * i;
        if (r < G) s_s[r * kSimtTileN + j] = valid ? dot[i] : -INFINITY;
      }
    }
    __syncthreads();
    // Online softmax: warp w updates rows w, w + 4, ...
    for (int r = warp; r < G; r += kSimtThreads / 32) {
      const float a = s_s[r * kSimtTileN + lane], b = s_s[r * kSimtTileN + lane + 32];
      const float m_old = m_s[r];
      const float m_new = fmaxf(m_old, WarpMax(fmaxf(a, b)));
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float pa = exp2f(a - m_use), pb = exp2f(b - m_use);
      s_s[r * kSimtTileN + lane] = pa;
      s_s[r * kSimtTileN + lane + 32] = pb;
      const float sum = WarpSum(pa + pb);
      if (lane == 0) {
        const float corr = exp2f(m_old - m_use);
        c_s[r] = corr;
        l_s[r] = l_s[r] * corr + sum;
        m_s[r] = m_new;
      }
    }
    __syncthreads();
    // P·V: each V element is read once per thread and used for all G rows; probabilities are
    // read four keys at a time (broadcast).
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int c = tid + i * kSimtThreads;
      if (c < d) {
        float a[G];
#pragma unroll
        for (int r = 0; r < G; ++r) a[r] = acc[i][r] * c_s[r];
        const T* vcol = v_s + c;
#pragma unroll 2
        for (int j = 0; j < kSimtTileN; j += 4) {
          float v[4];
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) v[jj] = ToFloat(vcol[(j + jj) * dp]);
#pragma unroll
          for (int r = 0; r < G; ++r) {
            const float4 pr = *reinterpret_cast<const float4*>(s_s + r * kSimtTileN + j);
            a[r] += pr.x * v[0] + pr.y * v[1] + pr.z * v[2] + pr.w * v[3];
          }
        }
#pragma unroll
        for (int r = 0; r < G; ++r) acc[i][r] = a[r];
      }
    }
  }
  __syncthreads();
  // Write: normalized output, or this slice's partial (unnormalized acc, m, l).
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int c = tid + i * kSimtThreads;
    if (c >= d) continue;
#pragma unroll
    for (int r = 0; r < G; ++r) {
      if (r >= rows) continue;
      const int64_t qh = t * p.num_heads + h0 + r;
      if (splits == 1) {
        const float l = l_s[r];
        static_cast<T*>(p.out)[qh * d + c] = FromFloat<T>(l > 0.0f ? acc[i][r] * out_scale / l : 0.0f);
      } else {
        part_acc[(qh * splits + z) * d + c] = acc[i][r] * out_scale;
        if (c == 0) part_ml[qh * splits + z] = make_float2(m_s[r], l_s[r]);
      }
    }
  }
}

// grid: (num_tokens, num_heads); merges the `splits` partials of one (token, head).
template <typename T>
__global__ void AttentionCombineKernel(const float* __restrict__ part_acc, const float2* __restrict__ part_ml,
                                       T* __restrict__ out, int num_heads, int d, int splits) {
  AllowDependentLaunch();
  GridDependencyWait();
  const int64_t qh = static_cast<int64_t>(blockIdx.x) * num_heads + blockIdx.y;
  const float2* ml = part_ml + qh * splits;
  float m = -INFINITY;
  for (int z = 0; z < splits; ++z) m = fmaxf(m, ml[z].x);
  const float m_use = m == -INFINITY ? 0.0f : m;
  float l = 0.0f;
  for (int z = 0; z < splits; ++z) l += ml[z].y * exp2f(ml[z].x - m_use);
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float o = 0.0f;
    for (int z = 0; z < splits; ++z) {
      const float w = exp2f(ml[z].x - m_use);
      if (w > 0.0f) o += part_acc[(qh * splits + z) * d + c] * w;
    }
    out[qh * d + c] = FromFloat<T>(o * inv);
  }
}

}  // namespace llm::cuda::attention
