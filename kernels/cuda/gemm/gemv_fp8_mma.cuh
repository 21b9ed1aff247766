// The FP8 GEMV's tensor-core ring form (included by gemv_fp8.cu only): E4M3 weights streamed
// through per-warp rings of shared-memory stages by bulk copies, as GemvRingKernel does
// (gemv_smem_ring.cuh), but multiplied on the tensor cores instead of the CUDA cores.
//
// Why: the CUDA-core ring spends ~60 instructions on each 16 weight bytes (16 E4M3 -> float
// conversions, 16 x conversions, 16 FMAs, shared loads), twice the bf16 ring's per byte, and its
// 8 warps an SM could not issue them fast enough to stream at more than 1.0-1.8 TB/s. Here one
// cvt.rn.f16x2.e4m3x2 widens two weights exactly into the f16 pair an m16n8k16 MMA takes as B,
// and one MMA does the 128 multiply-adds of 16 columns x 8 rows: ~15 instructions a lane per 16
// weight bytes, for any number of rows of x up to 8 (the MMA's M is the tokens; rows 8-15 are 0).
//
// x is staged whole in shared memory as f16, each token scaled by a power of two first so that
// its largest |x| is below 2^12 (exact: bf16 -> f16 loses nothing for values within 2^-26 of the
// row's largest; the power of two is taken back on the output). Products are exact in the MMA
// and accumulate in float32.
//
// Layout: a block an SM owns rows_per_block (a multiple of 8) contiguous output rows; its units
// are (group of 8 rows, segment of kc columns), group-major, and each warp takes a contiguous
// range of them, so a warp's accumulator carries over the segments of one group and is written
// out (a "flush": 8 rows x M tokens) when the group changes. A stage holds the 8 rows of a unit,
// each kc bytes copied by its own bulk copy (lanes 0-7) at a stride of kc + 64 bytes, so the 8
// lanes of a 128-bit shared-load phase (rows g, g + 1; 64 bytes each) hit distinct banks.
//
// Fragments (mma_sync.cuh): lane (g = lane / 4, t = lane % 4) owns 16 contiguous weight bytes of
// row g in each 64-column tile of the unit, [16 t, 16 t + 16), and the same 16 columns of token
// g's x. MMA step s (0-3) feeds bytes 16 t + 4 s .. + 3: logical columns (2t, 2t + 1) are the
// first pair, (2t + 8, 2t + 9) the second, for weights (B) and x (A) alike, so every lane of a
// column maps the same physical columns, whatever the row or token.
#pragma once

#include <cuda_fp16.h>

#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/fp8.cuh"
#include "kernels/cuda/common/mma_sync.cuh"

namespace llm::cuda {

inline constexpr int kFp8MmaWarps = 8;
inline constexpr int kFp8MmaGroupRows = 8;   // weight rows a unit (the MMA's N)
inline constexpr int kFp8MmaTileCols = 64;   // columns a warp covers per 16-byte load a lane
inline constexpr int kFp8MmaRowPad = 64;     // bytes added between a stage's rows where kc is a multiple of 128
inline constexpr int kFp8MmaMaxStages = 8;
inline constexpr int kFp8MmaXTarget = 12;    // log2 of the bound on |x| after the per-token scaling
inline constexpr int64_t kFp8MmaMaxSmem = 227 * 1024;

struct GemvFp8MmaPlan {
  int rows_per_block = 0;  // a multiple of kFp8MmaGroupRows
  int blocks = 0;
  int kc = 0;              // columns a unit (a multiple of kFp8MmaTileCols dividing K)
  int row_bytes = 0;       // bytes between a stage's rows: kc, padded to an odd multiple of 64
  int stages = 0;          // ring stages a warp
  int flushes = 0;         // accumulator write-outs a warp at most
  int x_stride = 0;        // f16 elements between x rows in shared memory
  int slot_offset = 0, tag_offset = 0, x_offset = 0, ring_offset = 0;
  size_t smem_bytes = 0;
};

// The layout for units of kc columns; false if fewer than two stages a warp fit (where a warp
// has two units or more).
inline bool LayOutGemvFp8Mma(int64_t k, int64_t groups_per_block, int m_template, int64_t kc, size_t ring_bytes,
                             GemvFp8MmaPlan* p) {
  p->kc = static_cast<int>(kc);
  p->row_bytes = static_cast<int>(kc % 128 == 0 ? kc + kFp8MmaRowPad : kc);
  p->x_stride = static_cast<int>(k + 8);  // 16 bytes more than 2K (a multiple of 128): conflict-free
  const int64_t split = k / kc, units = groups_per_block * split;
  const int64_t per_warp = (units + kFp8MmaWarps - 1) / kFp8MmaWarps;
  // A contiguous range of L units in group-major order touches at most ceil(L / split) + 1 groups.
  p->flushes = static_cast<int>((per_warp + split - 1) / split + 1);
  const int64_t stage_bytes = int64_t{kFp8MmaGroupRows} * p->row_bytes;
  const int64_t x_bytes = int64_t{m_template} * p->x_stride * 2;
  const int64_t slot_bytes = int64_t{kFp8MmaWarps} * p->flushes * kFp8MmaGroupRows * m_template * 4;
  const int64_t tag_bytes = int64_t{kFp8MmaWarps} * (p->flushes + 1) * 4;
  auto layout = [&] {
    p->slot_offset = kFp8MmaWarps * p->stages * 8 + 16 * 4;  // barriers, then the tokens' exponents
    p->tag_offset = static_cast<int>(p->slot_offset + slot_bytes);
    p->x_offset = static_cast<int>((p->tag_offset + tag_bytes + 15) / 16 * 16);
    p->ring_offset = static_cast<int>((p->x_offset + x_bytes + 127) / 128 * 128);
    p->smem_bytes = static_cast<size_t>(p->ring_offset + int64_t{kFp8MmaWarps} * p->stages * stage_bytes);
  };
  int64_t most = std::min<int64_t>(kFp8MmaMaxStages, per_warp);
  if (ring_bytes > 0) most = std::min<int64_t>(most, static_cast<int64_t>(ring_bytes) / (kFp8MmaWarps * stage_bytes));
  p->stages = static_cast<int>(std::max<int64_t>(most, 1));
  for (layout(); p->smem_bytes > kFp8MmaMaxSmem && p->stages > 1; layout()) --p->stages;
  return p->smem_bytes <= kFp8MmaMaxSmem && (p->stages >= 2 || per_warp < 2);
}

// Picks the form's layout for an N x K E4M3 weight and M (template) rows of x, within
// `ring_bytes` of stages per block (0: what x and the partials leave). False if K is not a
// multiple of 64, or x does not fit beside two stages a warp.
inline bool PlanGemvFp8Mma(int64_t n, int64_t k, int m_template, int num_sms, size_t ring_bytes,
                           GemvFp8MmaPlan* plan) {
  if (n <= 0 || k <= 0 || k % kFp8MmaTileCols != 0 || num_sms <= 0 || n > 0x7fffffff || k > 0x7fffffff) return false;
  const int64_t groups = (n + kFp8MmaGroupRows - 1) / kFp8MmaGroupRows;
  const int64_t groups_per_block = (groups + num_sms - 1) / num_sms;
  // Unit size: the busiest warp's bytes plus a per-unit overhead (barrier wait, refill) worth
  // ~1 KB of streaming, among the sizes that leave two stages a warp.
  int64_t best_cost = -1;
  GemvFp8MmaPlan best;
  for (int64_t kc = kFp8MmaTileCols; kc <= std::min<int64_t>(k, 1024); kc += kFp8MmaTileCols) {
    GemvFp8MmaPlan p;
    if (k % kc != 0 || !LayOutGemvFp8Mma(k, groups_per_block, m_template, kc, ring_bytes, &p)) continue;
    const int64_t per_warp = (groups_per_block * (k / kc) + kFp8MmaWarps - 1) / kFp8MmaWarps;
    const int64_t cost = per_warp * (kFp8MmaGroupRows * kc + 1024);
    if (best_cost < 0 || cost < best_cost) {
      best_cost = cost;
      best = p;
    }
  }
  if (best_cost < 0) return false;
  best.rows_per_block = static_cast<int>(groups_per_block * kFp8MmaGroupRows);
  best.blocks = static_cast<int>((n + best.rows_per_block - 1) / best.rows_per_block);
  *plan = best;
  return true;
}

// out[m, n] = (x[m, :] · W[n, :]) * row_scale(n) (+ bias[n]) for m < m_rows <= M, with W E4M3
// [N, K] and row_scale(n) = scale[(n / rows_per) * cols] (per tensor or per channel).
template <typename T, typename TOut, int M>
__global__ void __launch_bounds__(kFp8MmaWarps * 32, 1)
    GemvFp8MmaKernel(const T* __restrict__ x, const uint8_t* __restrict__ w, const float* __restrict__ scale,
                     int scale_rows_per, int scale_cols, const T* __restrict__ bias, TOut* __restrict__ out,
                     int m_rows, int n, int k, GemvFp8MmaPlan plan) {
  static_assert(M >= 1 && M <= 8, "tokens are the MMA's rows 0-7");
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int stages = plan.stages, kc = plan.kc, split = k / kc;
  const int row_bytes = plan.row_bytes;
  const int stage_bytes = kFp8MmaGroupRows * row_bytes;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem) + warp * stages;
  int* x_exp = reinterpret_cast<int*>(smem + kFp8MmaWarps * stages * 8);  // [16]: |x| bound, then exponent
  float* slots = reinterpret_cast<float*>(smem + plan.slot_offset);      // [warp][flush][8 rows][M]
  int* tags = reinterpret_cast<int*>(smem + plan.tag_offset);            // [warp][flush]: group; [8 * F + warp]: count
  __half* xs = reinterpret_cast<__half*>(smem + plan.x_offset);          // [M][x_stride]
  unsigned char* ring = smem + plan.ring_offset + static_cast<size_t>(warp) * stages * stage_bytes;

  const int row0 = blockIdx.x * plan.rows_per_block;
  const int rows = min(plan.rows_per_block, n - row0);
  const int units = (rows + kFp8MmaGroupRows - 1) / kFp8MmaGroupRows * split;
  const int u_begin = warp * units / kFp8MmaWarps, u_end = (warp + 1) * units / kFp8MmaWarps;
  const int my_units = u_end - u_begin;
  const uint8_t* w_block = w + static_cast<int64_t>(row0) * k;

  // Lanes 0-7 each copy one row of unit j into stage s; rows past the block's end repeat its
  // last row (their outputs are never written).
  uint64_t policy = 0;
  auto issue = [&](int j, int s) {
    const int unit = u_begin + j, grp = unit / split, seg = unit % split;
    const int r = min(grp * kFp8MmaGroupRows + lane, rows - 1);
    BulkLoadToShared(ring + s * stage_bytes + lane * row_bytes, w_block + static_cast<int64_t>(r) * k + seg * kc,
                     static_cast<uint32_t>(kc), &bars[s], policy);
  };
  if (lane == 0) {
    for (int s = 0; s < stages; ++s) MbarrierInit(&bars[s], kFp8MmaGroupRows);
    FenceMbarrierInit();
  }
  if (threadIdx.x < 16) x_exp[threadIdx.x] = 0;
  __syncwarp();
  if (lane < kFp8MmaGroupRows) {
    policy = L2EvictFirstPolicy();
    for (int j = 0; j < min(stages, my_units); ++j) issue(j, j);
    if (lane == 0 && my_units <= stages) AllowDependentLaunch();
  }
  GridDependencyWait();  // x is the predecessor's output
  __syncthreads();       // x_exp zeroed; barrier initializations visible to the block

  // x into shared memory as f16, each token scaled by 2^-e so that its |x| < 2^kFp8MmaXTarget:
  // one round of global loads stores x as it is (16 bits either way) and finds the tokens' largest
  // |x| (as float bits, which order like the values); each thread then rewrites its own vectors.
  constexpr int kXVec = Vec16<T>::kVec;
  static_assert(kXVec == 8, "16-bit x");
  constexpr int kBatch = 4;  // loads in flight a thread
  const int row_vecs = k / kXVec, x_vecs = m_rows * row_vecs;
  auto x_at = [&](int i) {
    const int tok = i / row_vecs;
    return reinterpret_cast<uint4*>(xs + tok * plan.x_stride + (i - tok * row_vecs) * kXVec);
  };
  {
    float amax[M];
#pragma unroll
    for (int m = 0; m < M; ++m) amax[m] = 0.0f;
    for (int base = threadIdx.x; base < x_vecs; base += kBatch * blockDim.x) {
      Vec16<T> v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = base + b * blockDim.x;
        if (i < x_vecs) v[b] = LoadVec(x + static_cast<int64_t>(i) * kXVec);
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int i = base + b * blockDim.x;
        if (i >= x_vecs) continue;
        *x_at(i) = *reinterpret_cast<const uint4*>(&v[b]);
        float a = 0.0f;
#pragma unroll
        for (int e = 0; e < kXVec; ++e) a = fmaxf(a, fabsf(ToFloat(v[b].v[e])));
        const int tok = i / row_vecs;
#pragma unroll
        for (int m = 0; m < M; ++m)
          if (m == tok) amax[m] = fmaxf(amax[m], a);
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float a = WarpMax(amax[m]);
      if (lane == 0 && m < m_rows && a > 0.0f) atomicMax(&x_exp[m], __float_as_int(a));
    }
  }
  __syncthreads();
  if (threadIdx.x < M) {
    int e = 0;
    const float a = __int_as_float(x_exp[threadIdx.x]);
    if (a > 0.0f && isfinite(a)) {
      frexpf(a, &e);  // a < 2^e
      e -= kFp8MmaXTarget;
    }
    x_exp[8 + threadIdx.x] = e;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < x_vecs; i += blockDim.x) {
    uint4* p = x_at(i);
    const uint4 raw = *p;
    const T* v = reinterpret_cast<const T*>(&raw);
    const int e = -x_exp[8 + i / row_vecs];
    uint32_t packed[kXVec / 2];
#pragma unroll
    for (int q = 0; q < kXVec / 2; ++q) {
      const __half2 h = __floats2half2_rn(ldexpf(ToFloat(v[2 * q]), e), ldexpf(ToFloat(v[2 * q + 1]), e));
      packed[q] = *reinterpret_cast<const uint32_t*>(&h);
    }
    *p = make_uint4(packed[0], packed[1], packed[2], packed[3]);
  }
  __syncthreads();

  const __half* x_lane = xs + min(g, m_rows - 1) * plan.x_stride + 16 * t;
  float* my_slots = slots + warp * plan.flushes * kFp8MmaGroupRows * M;
  int* my_tags = tags + warp * plan.flushes;
  int flushes = 0;
  float acc0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int j = 0; j < my_units; ++j) {
    const int s = j % stages;
    MbarrierWait(&bars[s], (j / stages) & 1);
    const int unit = u_begin + j, grp = unit / split, seg = unit % split;
    const unsigned char* w_lane = ring + s * stage_bytes + g * row_bytes + 16 * t;
    const __half* xk = x_lane + seg * kc;
#pragma unroll 2
    for (int c = 0; c < kc; c += kFp8MmaTileCols) {
      const uint4 wv = *reinterpret_cast<const uint4*>(w_lane + c);
      const uint4 xa = *reinterpret_cast<const uint4*>(xk + c);
      const uint4 xb = *reinterpret_cast<const uint4*>(xk + c + 8);
      const uint32_t wq[4] = {wv.x, wv.y, wv.z, wv.w};
      const uint32_t xq[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
#pragma unroll
      for (int st = 0; st < 4; ++st) {
        const uint32_t a[4] = {xq[2 * st], 0u, xq[2 * st + 1], 0u};
        const uint32_t b0 = Fp8x2ToHalf2Bits(wq[st] & 0xffffu), b1 = Fp8x2ToHalf2Bits(wq[st] >> 16);
        Mma16816<__half>::Run(st % 2 == 0 ? acc0 : acc1, a, b0, b1);
      }
    }
    // Every lane has read stage s: refill it.
    __syncwarp();
    if (lane < kFp8MmaGroupRows && j + stages < my_units) {
      FenceProxyAsyncShared();
      issue(j + stages, s);
      if (lane == 0 && j + stages == my_units - 1) AllowDependentLaunch();
    }
    // Write the group's sums out when the next unit starts another group (or this is the last):
    // c0, c1 are token g's sums for rows 2t, 2t + 1 of the group.
    if (j + 1 == my_units || (unit + 1) / split != grp) {
      if (g < M) {
        float* slot = my_slots + flushes * kFp8MmaGroupRows * M;
        slot[(2 * t) * M + g] = acc0[0] + acc1[0];
        slot[(2 * t + 1) * M + g] = acc0[1] + acc1[1];
      }
      if (lane == 0) my_tags[flushes] = grp;
      ++flushes;
#pragma unroll
      for (int q = 0; q < 4; ++q) acc0[q] = acc1[q] = 0.0f;
    }
  }
  if (lane == 0) tags[kFp8MmaWarps * plan.flushes + warp] = flushes;
  __syncthreads();
  // Each output: the flushes of its group in warp order (fixed: deterministic), then the scales.
  for (int i = threadIdx.x; i < rows * m_rows; i += blockDim.x) {
    const int r = i / m_rows, m = i - r * m_rows;
    const int grp = r / kFp8MmaGroupRows, rr = r % kFp8MmaGroupRows;
    float sum = 0.0f;
    for (int wi = 0; wi < kFp8MmaWarps; ++wi) {
      const int count = tags[kFp8MmaWarps * plan.flushes + wi];
      for (int f = 0; f < count; ++f)
        if (tags[wi * plan.flushes + f] == grp)
          sum += slots[((wi * plan.flushes + f) * kFp8MmaGroupRows + rr) * M + m];
    }
    const int row = row0 + r;
    sum = ldexpf(sum, x_exp[8 + m]) * scale[static_cast<int64_t>(row / scale_rows_per) * scale_cols];
    if (bias) sum += ToFloat(bias[row]);
    out[static_cast<int64_t>(m) * n + row] = FromFloat<TOut>(sum);
  }
}

}  // namespace llm::cuda
