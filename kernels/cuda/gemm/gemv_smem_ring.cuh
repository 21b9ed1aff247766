// The GEMV form that streams weights through a ring of shared-memory stages filled by bulk copies
// (gemv.cu; its pieces also serve gemv_fp8.cu's ring forms).
//
// Why: at batch 1 a decode linear of a tensor-parallel shard moves 8-25 MB, a few microseconds of
// DRAM time, and the register-prefetching GEMV loses 3-5 us of each to ramp and tail: before the
// previous kernel finishes it can have only ~16 KB a block in flight (more costs registers and
// spills). Bulk copies hold no registers, so this form issues up to ~200 KB an SM of weight loads
// before it waits on its predecessor (launched early by programmatic dependent launch), i.e. a
// TP2 rank's whole QKV shard across the GPU, and keeps DRAM busy through the small kernels between
// linears.
//
// Layout: one block an SM, each block a contiguous range of output rows (contiguous weight bytes);
// the block's (row, K segment) units go round-robin to its warps. Each warp owns a private ring:
// its lane 0 issues the bulk copies of the warp's next units and every lane waits on the stage's
// barrier, so no block-wide synchronization until the final sum of each row's segment partials
// (fixed order: deterministic).
//
// The block lets its successors launch (programmatic dependent launch; the first call in a block
// counts) as soon as one of its warps has issued its last copy: the small kernel that follows
// launches and lets the next linear launch in turn, whose blocks take each SM as this kernel's
// block leaves it (the default ring uses all the shared memory its x and partials leave, so one
// block fits an SM) and start their own stream during the small kernels. There is one block an
// SM, so successors never hold slots this grid's blocks still need. A 96 KB ring (two blocks an
// SM, the next stream starting during this one) was slower in the step: prefetch depth matters
// more (benchmarks/RESULTS.md).
#pragma once

#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {

inline constexpr int kRingWarps = 8;
inline constexpr int kRingMaxStages = 16;
inline constexpr int64_t kRingMaxSmemBytes = 227 * 1024;  // dynamic shared memory a block may have on sm_90

// The host's choice of a ring for one shape (see PlanGemvRing).
struct GemvRingPlan {
  int rows_per_block = 0;
  int blocks = 0;
  int split = 0;       // K segments per row (units per row)
  int chunk_vecs = 0;  // 16-byte vectors per unit
  int stages = 0;      // ring stages per warp
  int partial_offset = 0, x_offset = 0, ring_offset = 0;
  size_t smem_bytes = 0;
};

// Pieces every ring form shares (this bf16 one, gemv_fp8.cu's, gemv_fp8_mma.cuh).

// x [x_vecs 16-byte vectors] into shared memory in one round of loads: read in place, each warp
// would pay an L2 round trip per few vectors of its first unit, after the wait, on the critical path.
template <typename T>
__device__ __forceinline__ void StageXInShared(const T* __restrict__ x, T* xs, int x_vecs) {
  constexpr int kVec = Vec16<T>::kVec;
  constexpr int kBatch = 4;  // loads in flight per thread
  for (int base = threadIdx.x; base < x_vecs; base += kBatch * blockDim.x) {
    Vec16<T> v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * blockDim.x;
      if (i < x_vecs) v[b] = LoadVec(x + static_cast<int64_t>(i) * kVec);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = base + b * blockDim.x;
      if (i < x_vecs) StoreVec(xs + i * kVec, v[b]);
    }
  }
}

// One warp's place in a ring kernel's block (GemvRingPlan's layout): its stage barriers and ring,
// the block's unit partials and staged x, the block's rows, and how many of the block's (row,
// segment) units are this warp's (its j-th is block unit warp + j * kRingWarps).
struct RingWarp {
  uint64_t* bars;
  float* partial;
  unsigned char* x;
  unsigned char* ring;
  int row0, rows, my_units;
  __device__ __forceinline__ RingWarp(unsigned char* smem, const GemvRingPlan& plan, int warp, int n,
                                      uint32_t chunk_bytes)
      : bars(reinterpret_cast<uint64_t*>(smem) + warp * plan.stages),
        partial(reinterpret_cast<float*>(smem + plan.partial_offset)),
        x(smem + plan.x_offset),
        ring(smem + plan.ring_offset + static_cast<size_t>(warp) * plan.stages * chunk_bytes),
        row0(blockIdx.x * plan.rows_per_block),
        rows(min(plan.rows_per_block, n - row0)),
        my_units(rows * plan.split > warp ? (rows * plan.split - warp + kRingWarps - 1) / kRingWarps : 0) {}
};

// Lane 0 initializes the warp's stage barriers and issues the copies of its first `stages` units
// (unit j's weights at src_of(j)); a warp with no more units than stages has issued its last copy,
// so the block's successors may launch. Returns lane 0's L2 policy for the later copies.
template <typename SrcOf>
__device__ __forceinline__ uint64_t StartRing(int lane, int stages, int my_units, uint64_t* bars, unsigned char* ring,
                                              uint32_t chunk_bytes, SrcOf src_of) {
  uint64_t policy = 0;
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) MbarrierInit(&bars[s], 1);
    FenceMbarrierInit();
    policy = L2EvictFirstPolicy();
    for (int j = 0; j < min(stages, my_units); ++j)
      BulkLoadToShared(ring + j * chunk_bytes, src_of(j), chunk_bytes, &bars[j], policy);
    if (my_units <= stages) AllowDependentLaunch();
  }
  return policy;
}

// Every lane has read stage `stage` of unit j (its values are in registers): lane 0 refills it
// with the warp's unit j + stages, whose weights start at `src_of(j + stages)`; the warp's last copy
// lets the block's successors launch.
template <typename SrcOf>
__device__ __forceinline__ void RefillRingStage(int lane, int j, int stages, int my_units, unsigned char* stage,
                                                SrcOf src_of, uint32_t chunk_bytes, uint64_t* bar, uint64_t policy) {
  __syncwarp();
  if (lane == 0 && j + stages < my_units) {
    FenceProxyAsyncShared();
    BulkLoadToShared(stage, src_of(j + stages), chunk_bytes, bar, policy);
    if (j + stages == my_units - 1) AllowDependentLaunch();
  }
}

// A unit's M dot products, summed over the warp (times `scale`), kept by lane 0 in partial[unit][m].
template <int M>
__device__ __forceinline__ void KeepUnitSums(float (&acc)[M], float scale, float* partial, int unit, int lane) {
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = WarpSum(acc[m]) * scale;
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m) partial[unit * M + m] = acc[m];
  }
}

// After the block's units: each output is its row's `split` unit sums in a fixed order, plus bias.
template <int M, typename T, typename TOut>
__device__ __forceinline__ void StoreRowSums(const float* partial, int rows, int split, int m_rows,
                                             const T* __restrict__ bias, int row0, int n, TOut* __restrict__ out) {
  __syncthreads();
  for (int i = threadIdx.x; i < rows * M; i += blockDim.x) {
    const int r = i / M, m = i % M;
    if (m >= m_rows) continue;
    float sum = 0.0f;
    for (int q = 0; q < split; ++q) sum += partial[(r * split + q) * M + m];
    if (bias) sum += ToFloat(bias[row0 + r]);
    out[static_cast<int64_t>(m) * n + row0 + r] = FromFloat<TOut>(sum);
  }
}

// The M a ring kernel is instantiated for, for m rows of x.
inline int RingRowsTemplate(int64_t m) { return m == 1 ? 1 : m == 2 ? 2 : m <= 4 ? 4 : 8; }

template <typename T, typename TOut, int M>
__global__ void __launch_bounds__(kRingWarps * 32, 2)
    GemvRingKernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                   TOut* __restrict__ out, int m_rows, int n, int k, GemvRingPlan plan) {
  constexpr int kVec = Vec16<T>::kVec;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int stages = plan.stages, split = plan.split;
  const int chunk_elems = plan.chunk_vecs * kVec;
  const uint32_t chunk_bytes = static_cast<uint32_t>(chunk_elems * sizeof(T));
  const RingWarp rw(smem, plan, warp, n, chunk_bytes);
  T* xs = reinterpret_cast<T*>(rw.x);
  const T* w_block = w + static_cast<int64_t>(rw.row0) * k;
  // Unit j of this warp is block unit warp + j * kRingWarps: row (unit / split), segment
  // (unit % split). Rows are contiguous, so its weights start at unit * chunk_elems.
  auto unit_of = [&](int j) { return warp + j * kRingWarps; };

  auto src_of = [&](int j) { return w_block + static_cast<int64_t>(unit_of(j)) * chunk_elems; };
  const uint64_t policy = StartRing(lane, stages, rw.my_units, rw.bars, rw.ring, chunk_bytes, src_of);
  GridDependencyWait();  // x is the predecessor's output
  StageXInShared(x, xs, m_rows * (k / kVec));
  __syncthreads();  // also publishes lane 0's barrier initialization to its warp

  for (int j = 0; j < rw.my_units; ++j) {
    const int s = j % stages;
    MbarrierWait(&rw.bars[s], (j / stages) & 1);
    const int unit = unit_of(j);
    const T* wv = reinterpret_cast<const T*>(rw.ring + s * chunk_bytes);
    const T* xk = xs + (unit % split) * chunk_elems;
    float acc[M];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m] = 0.0f;
#pragma unroll 4
    for (int v = lane; v < plan.chunk_vecs; v += 32) {
      const Vec16<T> wq = LoadVec(wv + v * kVec);
      float wf[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) wf[e] = ToFloat(wq.v[e]);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        if (m < m_rows) {
          const Vec16<T> xv = LoadVec(xk + m * k + v * kVec);
          float sum = 0.0f;
#pragma unroll
          for (int e = 0; e < kVec; ++e) sum += wf[e] * ToFloat(xv.v[e]);
          acc[m] += sum;
        }
      }
    }
    RefillRingStage(lane, j, stages, rw.my_units, rw.ring + s * chunk_bytes, src_of, chunk_bytes, &rw.bars[s],
                    policy);
    KeepUnitSums(acc, 1.0f, rw.partial, unit, lane);
  }
  StoreRowSums<M>(rw.partial, rw.rows, split, m_rows, bias, rw.row0, n, out);
}

// Picks the ring for an N x K weight of `elem_bytes` elements and M (template) rows within
// `ring_bytes` of stages per block (fewer where x, staged whole in shared memory, leaves less).
// x's elements have `x_elem_bytes` (0: the weights'; FP8 weights take 16-bit x). False if the
// shape does not fit the form (K not whole vectors, no unit size that gives two stages a warp,
// or x too large).
inline bool PlanGemvRing(int64_t n, int64_t k, int elem_bytes, int m_template, int num_sms, size_t ring_bytes,
                         GemvRingPlan* plan, int x_elem_bytes = 0) {
  const int vec = 16 / elem_bytes;
  if (k % vec != 0 || n <= 0 || k <= 0) return false;
  const int64_t kvecs = k / vec;
  const int64_t x_bytes = int64_t{m_template} * k * (x_elem_bytes > 0 ? x_elem_bytes : elem_bytes);
  if (x_bytes > kRingMaxSmemBytes / 2) return false;
  GemvRingPlan p;
  p.rows_per_block = static_cast<int>((n + num_sms - 1) / num_sms);
  p.blocks = static_cast<int>((n + p.rows_per_block - 1) / p.rows_per_block);
  // The default ring takes what x and (about) the partial sums leave; the layout below trims it.
  const int64_t ring_budget =
      ring_bytes > 0 ? static_cast<int64_t>(ring_bytes) : kRingMaxSmemBytes - x_bytes - (int64_t{8} << 10);
  const int64_t max_chunk_bytes = ring_budget / (kRingWarps * 2);
  // Cost of a split in bytes the busiest warp streams, plus a per-unit overhead (barrier wait,
  // reduction) worth ~256 bytes of streaming.
  int64_t best_cost = -1;
  for (int split = 1; split <= 64; split *= 2) {
    if (kvecs % split != 0) break;
    const int64_t chunk_bytes = kvecs / split * 16;
    if (chunk_bytes > max_chunk_bytes) continue;
    if (chunk_bytes < 512 && best_cost >= 0) break;
    const int64_t per_warp = (int64_t{p.rows_per_block} * split + kRingWarps - 1) / kRingWarps;
    const int64_t cost = per_warp * (chunk_bytes + 256);
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      p.split = split;
    }
  }
  if (best_cost < 0) return false;
  p.chunk_vecs = static_cast<int>(kvecs / p.split);
  const int64_t chunk_bytes = int64_t{p.chunk_vecs} * 16;
  const int64_t per_warp = (int64_t{p.rows_per_block} * p.split + kRingWarps - 1) / kRingWarps;
  p.stages = static_cast<int>(std::min<int64_t>({kRingMaxStages, ring_budget / (kRingWarps * chunk_bytes), per_warp}));
  p.stages = std::max(p.stages, 1);
  const int64_t partial_bytes = int64_t{p.rows_per_block} * p.split * m_template * 4;
  auto layout = [&] {
    p.partial_offset = kRingWarps * p.stages * 8;
    p.x_offset = static_cast<int>((p.partial_offset + partial_bytes + 15) / 16 * 16);
    p.ring_offset = static_cast<int>((p.x_offset + x_bytes + 127) / 128 * 128);
    p.smem_bytes = static_cast<size_t>(p.ring_offset + int64_t{kRingWarps} * p.stages * chunk_bytes);
  };
  // x and the partials come first; the ring gives up stages to fit (at least one a warp).
  for (layout(); p.smem_bytes > kRingMaxSmemBytes && p.stages > 1; layout()) --p.stages;
  if (p.smem_bytes > kRingMaxSmemBytes) return false;
  *plan = p;
  return true;
}

}  // namespace llm::cuda
