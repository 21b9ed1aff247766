#include "kernels/cuda/sampling/sampler.h"

#include <cooperative_groups.h>

#include <algorithm>
#include <climits>

#include "kernels/core/philox.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr unsigned kFull = 0xffffffffu;
using u64 = unsigned long long;

// RadixSelect's histograms count 64-bit fixed-point masses (< 2^41 a token), but shared-memory
// atomics on 64-bit values are compare-and-swap loops that serialize on a shared bin: with them a
// radix pass over 128k logits took ~450 us on one SM (top-p 3.3 ms a row on an H200,
// sampler_bench). Each mass is therefore added as kHistPieces pieces of kHistPieceBits bits by
// native 32-bit atomics (a count adds one piece); a piece's sum stays below 2^32 for up to
// kSamplerMaxVocab tokens, and the pieces are recombined exactly after the pass.
constexpr int kHistPieceBits = 11, kHistPieces = 4;  // 44 bits >= the 41 of a mass

struct Shared {
  u64 hist[256];
  uint32_t hist_piece[kHistPieces][256];
  u64 hist0[256];    // a select's first histogram kept for the next (RadixSelect's keep_hist0)
  int min_id[256];   // the last pass's lowest candidate id a bin
  int sel_min_id;    // the lowest candidate id at the selected key
  u64 uscratch[32];
  float fa[32], fb[32], fc[32];
  int ia[32];
  uint32_t sel_key;
  u64 sel_above, sel_at, sel_target;
  int found;
  int top_count;
  int top_ids[kSamplerMaxTop];
  float top_vals[kSamplerMaxTop];
  // What a block shows the other blocks of its row's cluster (RowPart).
  u64 cl_u64;
  float cl_f;
  int cl_i;
};

// The blocks that share one row: a thread block cluster of `parts` blocks (one block where rows
// are many enough to fill the GPU). A sampled row makes ~13 passes over its logits (radix
// selects, sums, cumulative searches); on one SM a pass over 128k logits takes ~40 us, so rows of
// a small batch are split over the SMs of a cluster: each block takes every parts-th stretch of
// blockDim ids, and the block-wide reductions merge through distributed shared memory, in rank
// order (the same integer sums and id-ordered maxima, so the same results).
//
// kStreamAhead: the rows of the call do not fit L2 (~100+ rows of a 128k vocabulary on an H100),
// so every pass reads its row from DRAM, and a pass whose body ends in shared-memory atomics keeps
// one load a thread in flight: it ran at DRAM latency, not bandwidth. Each pass then asks L1 for
// the thread's id kAheadSteps steps ahead (Ahead) in the row's values (`stream`: the logits or
// their penalized copy). Rows that stay in L2 take the form without it, which is ~5% faster there
// (sampler_bench, H100: 256 rows top-p 1,743 -> 1,458 us; one row, one block 608 -> 640 with it).
template <bool kStreamAhead>
struct RowPart {
  static constexpr int kAheadSteps = 4;
  int rank = 0, parts = 1;
  const float* stream = nullptr;
  __device__ int first_id() const { return rank * blockDim.x + threadIdx.x; }  // this thread's first id
  __device__ int id_step() const { return parts * blockDim.x; }
  __device__ void Ahead(int i, int vocab) const {
    if constexpr (kStreamAhead) {
      const int j = i + kAheadSteps * id_step();
      if (stream != nullptr && j < vocab) asm volatile("prefetch.global.L1 [%0];" ::"l"(stream + j));
    }
  }
  // Every block of the row past this point (shared memory and global writes before it visible).
  __device__ void Sync() const {
    if (parts > 1)
      cooperative_groups::this_cluster().sync();
    else
      __syncthreads();
  }
  template <typename T>
  __device__ T* Of(T* p, int r) const {
    return parts > 1 ? cooperative_groups::this_cluster().map_shared_rank(p, r) : p;
  }
};

// Order-preserving map float -> uint32 (larger float, larger key); -0 folds onto +0.
__device__ __forceinline__ uint32_t FloatKey(float f) {
  if (f == 0.0f) f = 0.0f;
  const uint32_t b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float KeyFloat(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// Raw statistics of a stretch of a row of logits: online log-sum-exp (max m, sum s of exp(v - m))
// and the argmax (ties: lowest id).
struct RowStats {
  float m = -INFINITY, s = 0.0f, bv = -INFINITY;
  int bi = INT_MAX;
};

__device__ __forceinline__ void MergeStats(RowStats& a, float m2, float s2, float bv2, int bi2) {
  const float mm = fmaxf(a.m, m2);
  const float x = a.m == -INFINITY ? 0.0f : a.s * expf(a.m - mm);
  const float y = m2 == -INFINITY ? 0.0f : s2 * expf(m2 - mm);
  a.m = mm;
  a.s = x + y;
  if (bv2 > a.bv || (bv2 == a.bv && bi2 < a.bi)) {
    a.bv = bv2;
    a.bi = bi2;
  }
}

__device__ __forceinline__ void AddLogit(RowStats& a, float v, int i) { MergeStats(a, v, 1.0f, v, i); }

// Four consecutive logits from id i: one rescale for the four.
__device__ __forceinline__ void AddLogits4(RowStats& a, float4 v, int i) {
  const float mx = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
  if (mx == -INFINITY) {  // nothing to sum; the argmax still takes the lowest id (as one at a time)
    MergeStats(a, mx, 0.0f, mx, i);
    return;
  }
  const float s = expf(v.x - mx) + expf(v.y - mx) + expf(v.z - mx) + expf(v.w - mx);
  // The first of the four at the maximum: the lowest id among them.
  const int at = v.x == mx ? 0 : v.y == mx ? 1 : v.z == mx ? 2 : 3;
  MergeStats(a, mx, s, mx, i + at);
}

// This thread's share of ids [begin, end) of `row` (threads tid, tid + threads, ...): 16-byte
// loads, four in flight a thread, between a head and a tail of at most three single loads (rows
// of a vocabulary that is not a multiple of 4 are not 16-byte aligned). The loop is bound by how
// many loads are in flight, not by the arithmetic: one load a thread at a time left the greedy
// sampler of a batch-1 step at 41 us for 128k logits on an H100.
__device__ RowStats ScanLogits(const float* row, int begin, int end, int tid, int threads) {
  RowStats st;
  const int misaligned = static_cast<int>((reinterpret_cast<uintptr_t>(row + begin) >> 2) & 3);
  const int head = min(end - begin, (4 - misaligned) & 3);
  if (tid < head) AddLogit(st, row[begin + tid], begin + tid);
  const int body = begin + head;
  const int n4 = (end - body) / 4;
  const float4* p = reinterpret_cast<const float4*>(row + body);
  int j = tid;
  for (; j + 3 * threads < n4; j += 4 * threads) {
    const float4 a = p[j], b = p[j + threads], c = p[j + 2 * threads], d = p[j + 3 * threads];
    AddLogits4(st, a, body + 4 * j);
    AddLogits4(st, b, body + 4 * (j + threads));
    AddLogits4(st, c, body + 4 * (j + 2 * threads));
    AddLogits4(st, d, body + 4 * (j + 3 * threads));
  }
  for (; j < n4; j += threads) AddLogits4(st, p[j], body + 4 * j);
  const int tail = body + 4 * n4;
  if (tail + tid < end) AddLogit(st, row[tail + tid], tail + tid);
  return st;
}

// The block's merged statistics, returned to every thread (fa/fb/fc/ia: 32 entries each).
__device__ RowStats BlockMergeStats(RowStats st, float* fa, float* fb, float* fc, int* ia) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    MergeStats(st, __shfl_xor_sync(kFull, st.m, o), __shfl_xor_sync(kFull, st.s, o),
               __shfl_xor_sync(kFull, st.bv, o), __shfl_xor_sync(kFull, st.bi, o));
  __syncthreads();
  if (lane == 0) fa[warp] = st.m, fb[warp] = st.s, fc[warp] = st.bv, ia[warp] = st.bi;
  __syncthreads();
  if (warp == 0) {
    RowStats t;
    if (lane < warps) t.m = fa[lane], t.s = fb[lane], t.bv = fc[lane], t.bi = ia[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      MergeStats(t, __shfl_xor_sync(kFull, t.m, o), __shfl_xor_sync(kFull, t.s, o),
                 __shfl_xor_sync(kFull, t.bv, o), __shfl_xor_sync(kFull, t.bi, o));
    if (lane == 0) fa[0] = t.m, fb[0] = t.s, fc[0] = t.bv, ia[0] = t.bi;
  }
  __syncthreads();
  RowStats out;
  out.m = fa[0], out.s = fb[0], out.bv = fc[0], out.bi = ia[0];
  __syncthreads();
  return out;
}

// Rows of few blocks leave most SMs idle while one block streams a 128k-logit row: below
// kSplitRowsBelow rows, grid (chunks, rows) blocks first reduce a stretch of kStatsMinIds or more
// ids each into partial statistics, kept at the front of the row's `work` area (which only the
// penalties use, after these are read), and the sampler merges them.
constexpr int kStatsThreads = 256;
constexpr int kStatsMinIds = 4096;
constexpr int kSplitRowsBelow = 128;
constexpr int kStatsTargetBlocks = 256;

__device__ __forceinline__ int ChunkIds(int vocab, int chunks) {
  return ((vocab + chunks - 1) / chunks + 3) & ~3;
}

__global__ void __launch_bounds__(kStatsThreads)
    SamplerRowStatsKernel(const float* __restrict__ logits, int vocab, int chunks, float* __restrict__ work) {
  __shared__ float fa[32], fb[32], fc[32];
  __shared__ int ia[32];
  const int row = blockIdx.y, chunk = blockIdx.x;
  const int len = ChunkIds(vocab, chunks);
  const int begin = min(vocab, chunk * len), end = min(vocab, begin + len);
  const RowStats st = BlockMergeStats(
      ScanLogits(logits + static_cast<int64_t>(row) * vocab, begin, end, threadIdx.x, blockDim.x), fa, fb, fc,
      ia);
  if (threadIdx.x == 0) reinterpret_cast<RowStats*>(work + static_cast<int64_t>(row) * vocab)[chunk] = st;
}

// Probability mass in fixed point: e in [0, 1] -> round(e * 2^40).
__device__ __forceinline__ u64 Fixed(float e) { return __float2ull_rn(e * 1099511627776.0f); }

__device__ u64 BlockSumU64(u64 v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  __syncthreads();
  if (lane == 0) sh.uscratch[warp] = v;
  __syncthreads();
  u64 t = lane < static_cast<int>(blockDim.x >> 5) ? sh.uscratch[lane] : 0;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(kFull, t, o);
  return t;
}

// The row's total of v over all its threads (every thread gets it).
template <typename Part>
__device__ u64 RowSumU64(u64 v, Shared& sh, const Part& part) {
  const u64 t = BlockSumU64(v, sh);
  if (part.parts == 1) return t;
  if (threadIdx.x == 0) sh.cl_u64 = t;
  part.Sync();
  u64 total = 0;
  for (int r = 0; r < part.parts; ++r) total += *part.Of(&sh.cl_u64, r);
  part.Sync();  // read everywhere before anyone writes cl_u64 again
  return total;
}

// Exclusive prefix sum over threads in thread order.
__device__ u64 BlockExclusiveScan(u64 v, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  u64 incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 n = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += n;
  }
  __syncthreads();
  if (lane == 31) sh.uscratch[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    u64 t = lane < static_cast<int>(blockDim.x >> 5) ? sh.uscratch[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const u64 n = __shfl_up_sync(kFull, t, o);
      if (lane >= o) t += n;
    }
    sh.uscratch[lane] = t;
  }
  __syncthreads();
  const u64 offset = warp > 0 ? sh.uscratch[warp - 1] : 0;
  return offset + incl - v;
}

// The lowest index i with sum_{j <= i} wt(j) >= target (ascending index order), or -1. The row's
// threads take consecutive stretches of ids in (block rank, thread) order.
template <typename Wt, typename Part>
__device__ int FindCumulative(int vocab, Wt wt, u64 target, Shared& sh, const Part& part) {
  const int chunk = (vocab + part.id_step() - 1) / part.id_step();
  const int begin = min(vocab, part.first_id() * chunk), end = min(vocab, begin + chunk);
  u64 s = 0;
  for (int i = begin; i < end; ++i) s += wt(i);
  u64 excl = BlockExclusiveScan(s, sh);
  if (part.parts > 1) {  // plus the blocks of lower rank
    const u64 block_total = BlockSumU64(s, sh);
    if (threadIdx.x == 0) sh.cl_u64 = block_total;
    part.Sync();
    for (int r = 0; r < part.rank; ++r) excl += *part.Of(&sh.cl_u64, r);
    part.Sync();
  }
  if (threadIdx.x == 0) sh.found = -1;
  __syncthreads();
  if (excl < target && excl + s >= target) {
    u64 run = excl;
    for (int i = begin; i < end; ++i) {
      run += wt(i);
      if (run >= target) {
        sh.found = i;
        break;
      }
    }
  }
  part.Sync();
  int r = sh.found;
  for (int q = 0; q < part.parts; ++q) r = max(r, *part.Of(&sh.found, q));  // one block found it, or none
  part.Sync();
  return r;
}

// Radix select, descending: the key K with above < target <= above + at, where above is the
// weight of candidates with key > K and at the weight of those with key == K. Results in
// sh.sel_key / sel_above / sel_at. With `fraction` > 0 the target is ceil(fraction x the
// candidates' total weight) (at least 1, at most the total), taken from the first pass's
// histogram instead of a pass of its own, and left in sh.sel_target. The last pass also keeps the
// lowest candidate id of each full key: sh.sel_min_id is the selected key's (the first of its
// ties in id order, what FindCumulative returns for a count of 1). keep_hist0: the first pass's
// histogram is copied to sh.hist0; given_hist0: the first pass takes sh.hist0 as its histogram
// (the caller derived it) instead of a pass over the candidates.
template <typename Cand, typename Key, typename Wt, typename Part>
__device__ void RadixSelect(int vocab, Cand cand, Key keyf, Wt wt, u64 target, Shared& sh, const Part& part,
                            float fraction = 0.0f, bool keep_hist0 = false, bool given_hist0 = false) {
  uint32_t prefix = 0;
  u64 above = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    const uint32_t mask_hi = pass == 0 ? 0u : (0xffffffffu << (shift + 8));
    const bool last = pass == 3;
    if (pass == 0 && given_hist0) {
      for (int b = threadIdx.x; b < 256; b += blockDim.x) sh.hist[b] = sh.hist0[b];
      __syncthreads();
    } else {
      for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        for (int p = 0; p < kHistPieces; ++p) sh.hist_piece[p][b] = 0;
        if (last) sh.min_id[b] = INT_MAX;
      }
      __syncthreads();
      for (int i = part.first_id(); i < vocab; i += part.id_step()) {
        part.Ahead(i, vocab);
        if (!cand(i)) continue;
        const uint32_t k = keyf(i);
        if ((k & mask_hi) != prefix) continue;
        const uint32_t bin = (k >> shift) & 255u;
        const u64 w = wt(i);
#pragma unroll
        for (int p = 0; p < kHistPieces; ++p) {
          const uint32_t piece =
              static_cast<uint32_t>(w >> (kHistPieceBits * p)) & ((1u << kHistPieceBits) - 1);
          if (piece != 0) atomicAdd(&sh.hist_piece[p][bin], piece);
        }
        if (last) atomicMin(&sh.min_id[bin], i);
      }
      part.Sync();
      for (int b = threadIdx.x; b < 256; b += blockDim.x) {
        u64 sum = 0;
        for (int r = 0; r < part.parts; ++r)
          for (int p = 0; p < kHistPieces; ++p)
            sum += static_cast<u64>(*part.Of(&sh.hist_piece[p][b], r)) << (kHistPieceBits * p);
        sh.hist[b] = sum;
        if (pass == 0 && keep_hist0) sh.hist0[b] = sum;
      }
      part.Sync();  // every block has read the pieces before any zeroes them for the next pass
    }
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x;
      u64 s = 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) s += sh.hist[255 - 8 * lane - b];
      u64 incl = s;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const u64 n = __shfl_up_sync(kFull, incl, o);
        if (lane >= o) incl += n;
      }
      const u64 excl = incl - s;
      if (pass == 0 && fraction > 0.0f) {
        const u64 total = __shfl_sync(kFull, incl, 31);
        const u64 t = static_cast<u64>(ceil(static_cast<double>(fraction) * static_cast<double>(total)));
        target = max(1ull, min(t, total));
        if (lane == 0) sh.sel_target = target;
      }
      const unsigned ballot = __ballot_sync(kFull, above + excl < target && above + incl >= target);
      const int owner = ballot ? __ffs(ballot) - 1 : 31;
      if (lane == owner) {
        u64 run = above + excl;
        int chosen = 255 - 8 * lane - 7;
        for (int b = 0; b < 8; ++b) {
          const int bin = 255 - 8 * lane - b;
          if (run + sh.hist[bin] >= target) {
            chosen = bin;
            break;
          }
          if (b < 7) run += sh.hist[bin];
        }
        sh.sel_key = prefix | (static_cast<uint32_t>(chosen) << shift);
        sh.sel_above = run;
        sh.sel_at = sh.hist[chosen];
        if (last) {
          int m = INT_MAX;
          for (int r = 0; r < part.parts; ++r) m = min(m, *part.Of(&sh.min_id[chosen], r));
          sh.sel_min_id = m;
        }
      }
    }
    __syncthreads();
    prefix = sh.sel_key;
    above = sh.sel_above;
  }
}

// The nth candidate in id order (`match`) at the key RadixSelect just chose: its last pass kept
// the first (sh.sel_min_id); a later one takes a cumulative count.
template <typename Match, typename Part>
__device__ int NthAtSelectedKey(int vocab, Match match, u64 nth, Shared& sh, const Part& part) {
  if (nth == 1) return sh.sel_min_id;
  return FindCumulative(vocab, [&](int i) -> u64 { return match(i) ? 1 : 0; }, nth, sh, part);
}

template <bool kStreamAhead>
__global__ void __launch_bounds__(kThreads)
    SamplerKernel(const float* __restrict__ logits, int vocab, const SamplerRowParams* __restrict__ params,
                  const SamplerTokenEntry* __restrict__ entries, const int32_t* __restrict__ input_tokens,
                  float* __restrict__ work, SamplerRowResult* __restrict__ results,
                  int32_t* __restrict__ tokens_out, int stat_chunks, int parts) {
  __shared__ Shared sh;
  RowPart<kStreamAhead> part;
  part.parts = parts;
  part.rank = static_cast<int>(blockIdx.x) % parts;
  const int row = static_cast<int>(blockIdx.x) / parts, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warps = blockDim.x >> 5;
  const SamplerRowParams P = params[row];
  const float* raw = logits + static_cast<int64_t>(row) * vocab;

  // Raw statistics in one pass: log-sum-exp (online) and argmax (ties: lowest id); or the merge of
  // SamplerRowStatsKernel's partials.
  RowStats mine;
  if (stat_chunks > 1) {  // every block merges all the partials
    if (tid < stat_chunks)
      mine = reinterpret_cast<const RowStats*>(work + static_cast<int64_t>(row) * vocab)[tid];
  } else {
    const int len = ChunkIds(vocab, part.parts);
    const int begin = min(vocab, part.rank * len);
    mine = ScanLogits(raw, begin, min(vocab, begin + len), tid, blockDim.x);
  }
  RowStats stats = BlockMergeStats(mine, sh.fa, sh.fb, sh.fc, sh.ia);
  if (stat_chunks <= 1 && part.parts > 1) {  // the blocks' stretches, in rank order
    part.Sync();
    RowStats all;
    for (int r = 0; r < part.parts; ++r)
      MergeStats(all, *part.Of(&sh.fa[0], r), *part.Of(&sh.fb[0], r), *part.Of(&sh.fc[0], r),
                 *part.Of(&sh.ia[0], r));
    stats = all;
  }
  part.Sync();  // the partials (in `work`) and fa..ia read everywhere before they are overwritten
  const float raw_max = stats.m;
  const float log_z = raw_max + logf(stats.s);
  const int raw_argmax = stats.bi;

  // Logit biases and penalties on a working copy. A pending output token (the previous step's
  // sample, known only here) adds one to its entry's output count and makes it seen, or is a new
  // entry of count one.
  const bool penalized =
      P.repetition_penalty != 1.0f || P.presence_penalty != 0.0f || P.frequency_penalty != 0.0f;
  const int pending = penalized && P.pending_input_index >= 0 ? input_tokens[P.pending_input_index] : -1;
  const bool has_pen = P.entry_end > P.entry_begin || (pending >= 0 && pending < vocab);
  const float* src = raw;
  if (has_pen) {
    float* x = work + static_cast<int64_t>(row) * vocab;
    for (int i = part.first_id(); i < vocab; i += part.id_step()) x[i] = raw[i];
    if (tid == 0) sh.found = 0;
    part.Sync();  // the whole copy written before the penalties change it
    auto adjust = [&](int token, float bias, bool seen, int output_count) {
      float v = x[token] + bias;
      if (seen && P.repetition_penalty != 1.0f) v = v > 0.0f ? v / P.repetition_penalty : v * P.repetition_penalty;
      if (output_count > 0) v -= P.frequency_penalty * static_cast<float>(output_count) + P.presence_penalty;
      x[token] = v;
    };
    if (part.rank == 0) {  // one block applies them
      for (int e = P.entry_begin + tid; e < P.entry_end; e += blockDim.x) {
        const SamplerTokenEntry en = entries[e];
        const bool is_pending = en.token == pending;
        if (is_pending) sh.found = 1;
        adjust(en.token, en.bias, en.seen != 0 || is_pending, en.output_count + (is_pending ? 1 : 0));
      }
      __syncthreads();
      if (tid == 0 && pending >= 0 && pending < vocab && !sh.found) adjust(pending, 0.0f, true, 1);
    }
    part.Sync();
    src = x;
  }

  int token;
  if (P.temperature <= 0.0f) {
    if (!has_pen) {
      token = raw_argmax;
    } else {
      float v2 = -INFINITY;
      int i2 = INT_MAX;
      for (int i = part.first_id(); i < vocab; i += part.id_step()) {
        const float v = src[i];
        if (v > v2 || (v == v2 && i < i2)) {
          v2 = v;
          i2 = i;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFull, v2, o);
        const int oi = __shfl_xor_sync(kFull, i2, o);
        if (ov > v2 || (ov == v2 && oi < i2)) {
          v2 = ov;
          i2 = oi;
        }
      }
      if (lane == 0) {
        sh.fc[warp] = v2;
        sh.ia[warp] = i2;
      }
      __syncthreads();
      if (tid == 0) {
        for (int w = 1; w < warps; ++w)
          if (sh.fc[w] > v2 || (sh.fc[w] == v2 && sh.ia[w] < i2)) {
            v2 = sh.fc[w];
            i2 = sh.ia[w];
          }
        sh.cl_f = v2;
        sh.cl_i = i2;
      }
      part.Sync();
      v2 = -INFINITY;
      i2 = INT_MAX;
      for (int r = 0; r < part.parts; ++r) {
        const float rv = *part.Of(&sh.cl_f, r);
        const int ri = *part.Of(&sh.cl_i, r);
        if (rv > v2 || (rv == v2 && ri < i2)) {
          v2 = rv;
          i2 = ri;
        }
      }
      token = i2;
      part.Sync();
    }
  } else {
    const float temp = P.temperature;
    part.stream = src;
    auto val = [&](int i) { return src[i] / temp; };
    // Max of the scaled values: division by a positive number is monotone.
    float src_max;
    if (!has_pen) {
      src_max = raw_max;
    } else {
      float mx = -INFINITY;
      for (int i = part.first_id(); i < vocab; i += part.id_step()) mx = fmaxf(mx, src[i]);
      mx = BlockMax(mx, sh.fa);
      if (tid == 0) sh.cl_f = mx;
      part.Sync();
      src_max = -INFINITY;
      for (int r = 0; r < part.parts; ++r) src_max = fmaxf(src_max, *part.Of(&sh.cl_f, r));
      part.Sync();
    }
    const float mx = src_max / temp;
    auto prob = [&](int i) { return expf(val(i) - mx); };
    auto wt = [&](int i) { return Fixed(prob(i)); };
    auto key = [&](int i) { return FloatKey(val(i)); };
    auto key_wt = [&](uint32_t k) { return Fixed(expf(KeyFloat(k) - mx)); };
    auto all = [](int) { return true; };
    auto one = [](int) -> u64 { return 1; };

    // top-k: the k largest (ties: lowest ids).
    const bool topk = P.top_k > 0 && P.top_k < vocab;
    uint32_t k_key = 0;
    int k_id = INT_MAX;
    if (topk) {
      RadixSelect(vocab, all, key, one, static_cast<u64>(P.top_k), sh, part);
      k_key = sh.sel_key;
      const u64 need = static_cast<u64>(P.top_k) - sh.sel_above;
      if (need < sh.sel_at)
        k_id = NthAtSelectedKey(vocab, [&](int i) { return key(i) == k_key; }, need, sh, part);
      __syncthreads();
    }
    auto in_k = [&](int i) {
      if (!topk) return true;
      const uint32_t u = key(i);
      return u > k_key || (u == k_key && i <= k_id);
    };
    // top-p: the smallest prefix (in sorted order) whose mass reaches top_p of the top-k mass.
    const bool topp = P.top_p < 1.0f;
    // Without min-p the kept tokens are exactly top-p's: their mass and first histogram follow
    // from its select (below), and need no passes of their own.
    const bool kept_is_topp = topp && P.min_p <= 0.0f;
    uint32_t p_key = 0;
    int p_id = INT_MAX;
    // (Its mass: above the threshold key, plus the ties it keeps, each of the tie key's weight.)
    u64 topp_mass = 0;
    if (topp) {
      // The target, ceil(top_p x the top-k mass), from the select's first histogram.
      RadixSelect(vocab, in_k, key, wt, 0, sh, part, P.top_p, /*keep_hist0=*/kept_is_topp);
      const u64 target = sh.sel_target;
      p_key = sh.sel_key;
      const u64 w_key = key_wt(p_key), above = sh.sel_above, at = sh.sel_at;
      const u64 w_tie = max(1ull, w_key);
      const u64 ties = at / w_tie;
      const u64 j = (target - above + w_tie - 1) / w_tie;
      if (j < ties)
        p_id = NthAtSelectedKey(vocab, [&](int i) { return in_k(i) && key(i) == p_key; }, j, sh, part);
      topp_mass = above + (j < ties ? j * w_key : at);
      __syncthreads();
    }
    // The kept tokens' first histogram from the top-p select's: its bins above the threshold key's
    // whole, that key's bin the kept mass not above it, the bins below empty.
    if (kept_is_topp) {
      const uint32_t bp = p_key >> 24;
      if (tid == 0) {
        u64 above_bin = 0;
        for (uint32_t b = bp + 1; b < 256; ++b) above_bin += sh.hist0[b];
        sh.hist0[bp] = topp_mass - above_bin;
      }
      for (int b = tid; b < static_cast<int>(bp); b += blockDim.x) sh.hist0[b] = 0;
      __syncthreads();
    }
    auto kept = [&](int i) {
      if (!in_k(i)) return false;
      if (topp) {
        const uint32_t u = key(i);
        if (!(u > p_key || (u == p_key && i <= p_id))) return false;
      }
      return P.min_p <= 0.0f || prob(i) >= P.min_p;
    };
    u64 total = topp_mass;
    if (!kept_is_topp) {
      u64 mass = 0;
      for (int i = part.first_id(); i < vocab; i += part.id_step()) {
        part.Ahead(i, vocab);
        if (kept(i)) mass += wt(i);
      }
      total = RowSumU64(mass, sh, part);
      __syncthreads();
    }
    const float u = UniformFloat(P.seed, P.step);
    u64 target = static_cast<u64>(floor(static_cast<double>(u) * static_cast<double>(total)));
    if (total > 0 && target > total - 1) target = total - 1;
    target += 1;  // the first candidate whose cumulative mass exceeds u * total
    if (topp) {
      RadixSelect(vocab, kept, key, wt, target, sh, part, 0.0f, false, /*given_hist0=*/kept_is_topp);
      const uint32_t d_key = sh.sel_key;
      const u64 w_tie = max(1ull, key_wt(d_key));
      const u64 j = max(1ull, (target - sh.sel_above + w_tie - 1) / w_tie);
      token = NthAtSelectedKey(vocab, [&](int i) { return kept(i) && key(i) == d_key; }, j, sh, part);
    } else {
      token = FindCumulative(
          vocab, [&](int i) -> u64 { return kept(i) ? wt(i) : 0; }, target, sh, part);
    }
    if (token < 0) token = raw_argmax;  // unreachable: the top candidate always has mass
    __syncthreads();
  }

  SamplerRowResult* res = results + row;
  if (tid == 0 && part.rank == 0) {
    res->token = token;
    res->logprob = raw[token] - log_z;
    res->num_top = 0;
    if (tokens_out != nullptr) tokens_out[row] = token;
  }
  const int n_top = min(P.num_top_logprobs, min(vocab, kSamplerMaxTop));
  if (n_top > 0) {
    part.stream = raw;
    auto rkey = [&](int i) { return FloatKey(raw[i]); };
    RadixSelect(
        vocab, [](int) { return true; }, rkey, [](int) -> u64 { return 1; }, static_cast<u64>(n_top), sh,
        part);
    const uint32_t t_key = sh.sel_key;
    const u64 need = static_cast<u64>(n_top) - sh.sel_above;
    int t_id = INT_MAX;
    if (need < sh.sel_at)
      t_id = NthAtSelectedKey(vocab, [&](int i) { return rkey(i) == t_key; }, need, sh, part);
    if (tid == 0) sh.top_count = 0;
    __syncthreads();
    for (int i = part.first_id(); i < vocab; i += part.id_step()) {
      const uint32_t k = rkey(i);
      if (k > t_key || (k == t_key && i <= t_id)) {
        const int slot = atomicAdd(&sh.top_count, 1);
        if (slot < kSamplerMaxTop) {
          sh.top_ids[slot] = i;
          sh.top_vals[slot] = raw[i];
        }
      }
    }
    part.Sync();
    if (tid == 0 && part.rank == 0) {
      // Every block's picks (n_top in all; this block's are in place), then an insertion sort:
      // value desc, id asc.
      int n = min(sh.top_count, kSamplerMaxTop);
      for (int r = 1; r < part.parts; ++r) {
        const int count = min(*part.Of(&sh.top_count, r), kSamplerMaxTop);
        for (int a = 0; a < count && n < kSamplerMaxTop; ++a, ++n) {
          sh.top_ids[n] = *part.Of(&sh.top_ids[a], r);
          sh.top_vals[n] = *part.Of(&sh.top_vals[a], r);
        }
      }
      n = min(n, n_top);
      for (int a = 1; a < n; ++a) {
        const int id = sh.top_ids[a];
        const float v = sh.top_vals[a];
        int b = a - 1;
        while (b >= 0 && (sh.top_vals[b] < v || (sh.top_vals[b] == v && sh.top_ids[b] > id))) {
          sh.top_ids[b + 1] = sh.top_ids[b];
          sh.top_vals[b + 1] = sh.top_vals[b];
          --b;
        }
        sh.top_ids[b + 1] = id;
        sh.top_vals[b + 1] = v;
      }
      for (int a = 0; a < n; ++a) {
        res->top_token[a] = sh.top_ids[a];
        res->top_logprob[a] = sh.top_vals[a] - log_z;
      }
      res->num_top = n;
    }
  }
  part.Sync();  // no block leaves while another may still read its shared memory
}

}  // namespace

// SamplerKernel's launch for `rows` rows of `parts` blocks, each row's blocks one cluster.
struct SamplerLaunch {
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute cluster[1];
  SamplerLaunch(int64_t rows, int parts, cudaStream_t stream) {
    config.gridDim = dim3(static_cast<unsigned>(rows * parts));
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = static_cast<unsigned>(parts);
    cluster[0].val.clusterDim.y = 1;
    cluster[0].val.clusterDim.z = 1;
    config.attrs = cluster;  // points into this object: not copyable
    config.numAttrs = parts > 1 ? 1 : 0;
  }
  SamplerLaunch(const SamplerLaunch&) = delete;
  SamplerLaunch& operator=(const SamplerLaunch&) = delete;
};

// Blocks a row for `rows` rows: a cluster of up to 8 (the portable cluster size) while the rows
// leave SMs idle, where the GPU can place such a cluster of the kernel at all (asked once).
int SamplerRowParts(int64_t rows, int max_blocks_per_row) {
  const int want = std::min(max_blocks_per_row, rows <= 16 ? 8 : rows <= 32 ? 4 : 1);
  static const int fits = [] {
    for (int parts = 8; parts > 1; parts /= 2) {
      const SamplerLaunch launch(1, parts, nullptr);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, SamplerKernel<false>, &launch.config) == cudaSuccess &&
          clusters > 0)
        return parts;
      cudaGetLastError();  // a refusal is an answer, not an error to keep
    }
    return 1;
  }();
  return std::min(want, fits);
}

absl::Status LaunchSampler(const float* logits, int64_t rows, int64_t vocab, const SamplerRowParams* params,
                           const SamplerTokenEntry* entries, const int32_t* input_tokens, float* work,
                           SamplerRowResult* results, int32_t* tokens_out, Stream stream,
                           int max_blocks_per_row) {
  if (rows < 0 || vocab <= 0 || vocab > kSamplerMaxVocab || rows > 0x7fffffff)
    return absl::InvalidArgumentError(absl::StrCat("Sample: bad shape ", rows, " x ", vocab, " (at most ",
                                                   kSamplerMaxVocab, " tokens a row)"));
  if (rows == 0) return absl::OkStatus();
  int chunks = 1;
  if (rows < kSplitRowsBelow)
    chunks = static_cast<int>(
        std::max<int64_t>(1, std::min<int64_t>(kStatsTargetBlocks / rows, vocab / kStatsMinIds)));
  if (chunks > 1) {
    SamplerRowStatsKernel<<<dim3(static_cast<unsigned>(chunks), static_cast<unsigned>(rows)), kStatsThreads,
                            0, stream>>>(logits, static_cast<int>(vocab), chunks, work);
    CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  const int parts = SamplerRowParts(rows, std::max(1, max_blocks_per_row));
  const SamplerLaunch launch(rows, parts, stream);
  static const int64_t l2_bytes = [] {
    int device = 0, bytes = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess) {
      cudaGetLastError();
      return int64_t{50} << 20;
    }
    return int64_t{bytes};
  }();
  const bool stream_ahead = rows * vocab * static_cast<int64_t>(sizeof(float)) > l2_bytes;
  CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&launch.config, stream_ahead ? SamplerKernel<true> : SamplerKernel<false>,
                                          logits, static_cast<int>(vocab), params, entries, input_tokens, work,
                                          results, tokens_out, chunks, parts));
  return absl::OkStatus();
}

}  // namespace llm::cuda
