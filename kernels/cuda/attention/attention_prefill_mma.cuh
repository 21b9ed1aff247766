// Internal: FlashAttention-2 style prefill on Hopper's warpgroup MMAs over the paged cache, fp32
// accumulation. Two warpgroups a block of 128 query rows: S = Q Kᵀ with Q and K read from
// shared memory by the MMAs, O += P V with P from registers (S's accumulators, packed: the same
// layout) and V from shared memory (stored [keys][D]: the MMA's transposed-B form).
#pragma once

#include <type_traits>

#include "kernels/cuda/attention/attention_common.cuh"
#include "kernels/cuda/attention/attention_mma_common.cuh"
#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/fp8.cuh"
#include "kernels/cuda/common/wgmma.cuh"

namespace llm::cuda::attention {

// Warpgroups a block: each its own 64-row m-tiles of the block's query rows, all sharing the K and
// V tiles. Two of one m-tile each, at most 128 registers a thread, two blocks an SM (16 warps): 1 x
// 2048-token 8B prefill on an H200 288 TFLOP/s, against 263 with one warpgroup of two m-tiles (241
// registers, 8 warps an SM: too few to hide the softmax's latency; benchmarks/RESULTS.md).
constexpr int kMmaWarpgroups = 2;
constexpr int kMmaThreads = 128 * kMmaWarpgroups;
constexpr int kMmaBlockN = 64;  // keys per tile

// Query rows: kMmaMTiles 64-row warpgroup MMAs a warpgroup (each warp holds 16 rows of each).
constexpr int kMmaMTiles = 2 / kMmaWarpgroups;
constexpr int kMmaBlockRows = 64 * kMmaMTiles * kMmaWarpgroups;  // query rows per block

// Dynamic shared memory, from a 1024-byte aligned base: Q [kMmaBlockRows][D], K and V
// [kMmaBlockN][D], all in the warpgroup MMAs' layout (WgmmaTileElem); for an FP8 cache also the K
// and V tiles as staged bytes ([kMmaBlockN][D] each).
template <typename T, int D, bool kFp8 = false>
constexpr size_t PrefillSmemBytes() {
  return 1024 + sizeof(T) * static_cast<size_t>(kMmaBlockRows + 2 * kMmaBlockN) * D +
         (kFp8 ? 2 * kMmaBlockN * D : 0);
}

// Element offset of 16-byte chunk `chunk` of row `row` in a [rows][D] tile of 16-bit values laid
// out for the warpgroup MMAs: D / 64 blocks of 64 columns one after the other, each [rows][128
// bytes] with the 128-byte swizzle (chunk c of a row at c ^ (row % 8)), 8-row groups 1024 bytes
// apart. Q and K are K-major operands so (WgmmaDescSwizzle128), V an MN-major one (its rows are K,
// the keys: WgmmaDescSwizzle128MnMajor, the column blocks rows x 128 bytes apart).
__device__ __forceinline__ int WgmmaTileElem(int row, int chunk, int rows) {
  return ((chunk >> 3) * rows + row) * 64 + (((chunk & 7) ^ (row & 7)) << 3);
}

// grid: (num_heads, ceil(max_query_len / kMmaBlockRows), num_seqs); query block
// gridDim.y - 1 - blockIdx.y (see the launcher: the blocks with the most keys start first).
// Warpgroup g's m-tile mt is rows [64 t, 64 t + 64) of the block (t = g kMmaMTiles + mt), of which
// its warp w (0-3) holds the 16 from 64 t + 16 w (as the warpgroup MMA's accumulators lie): each
// thread rows ra = 64 t + 16 w + lane / 4 and rb = ra + 8.
// kPow2Pages: the cache's page size is a power of two (the usual case), so a key's page and slot
// take a shift and a mask instead of an integer division.
// kFp8: the cache holds E4M3 (PagedAttentionParams::fp8_cache): the K/V tiles travel as bytes in
// the same cp.async groups the 16-bit tiles take (half the bytes), and once a tile has landed the
// block widens it exactly to T into the swizzled tile the MMAs read (loading and widening each
// chunk synchronously instead left every warp waiting on global memory: 121 TFLOP/s against bf16's
// 200 in the 8B prefill); k_scale joins the query's scale and v_scale the output's normalization.
template <typename T, int D, bool kPow2Pages, bool kFp8 = false>
__global__ void __launch_bounds__(kMmaThreads, 2) AttentionPrefillMmaKernel(PagedAttentionParams p) {
  static_assert(D % 64 == 0 && D <= 128, "head_dim tile: whole 128-byte swizzle spans");
  static_assert(sizeof(T) == 2, "16-bit operands");
  constexpr int MT = kMmaMTiles, BM = kMmaBlockRows;
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kTilesN = kMmaBlockN / 8, kTilesD = D / 8, kStepsD = D / 16;
  constexpr WgmmaRsType kWgmmaType = std::is_same_v<T, __half> ? WgmmaRsType::kF16 : WgmmaRsType::kBF16;
  AllowDependentLaunch();
  extern __shared__ __align__(128) unsigned char prefill_smem[];
  T* const q_s = reinterpret_cast<T*>(prefill_smem + ((1024 - (SharedAddress(prefill_smem) & 1023)) & 1023));
  T* const k_s = q_s + BM * D;
  T* const v_s = k_s + kMmaBlockN * D;
  uint8_t* const k8_s = reinterpret_cast<uint8_t*>(v_s + kMmaBlockN * D);  // kFp8 only
  uint8_t* const v8_s = k8_s + kMmaBlockN * D;

  const int m_blk = gridDim.y - 1 - blockIdx.y, h = blockIdx.x, seq = blockIdx.z;
  const int q_begin = p.query_start[seq], q_len = p.query_start[seq + 1] - q_begin;
  const int row0 = m_blk * BM;
  if (row0 >= q_len) return;
  const int ctx = p.context_lens[seq];
  const int p0 = ctx - q_len;  // position of the sequence's first query
  const int rows_here = min(BM, q_len - row0);
  const int kv_end = min(ctx, p0 + row0 + rows_here);  // exclusive
  const int kv_begin = p.sliding_window > 0 ? max(0, p0 + row0 - p.sliding_window + 1) : 0;
  const int n_first = kv_begin / kMmaBlockN * kMmaBlockN;
  const int kvh = h / (p.num_heads / p.num_kv_heads);
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks_per_seq;
  using TC = std::conditional_t<kFp8, uint8_t, T>;  // a cache element
  const TC* kc = static_cast<const TC*>(p.k_cache);
  const TC* vc = static_cast<const TC*>(p.v_cache);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;

  // Q tile -> shared (rows past the sequence: zeros).
  {
    const T* q = static_cast<const T*>(p.q);
    for (int i = tid; i < BM * kChunks; i += kMmaThreads) {
      const int r = i / kChunks, c = i % kChunks;
      const bool valid = r < rows_here;
      const T* src = q + ((static_cast<int64_t>(q_begin) + row0 + (valid ? r : 0)) * p.num_heads + h) * D + c * 8;
      CpAsync16(q_s + WgmmaTileElem(r, c, BM), src, valid);
    }
  }
  // Each thread copies one 16-byte chunk column of every kMmaThreads / kChunks-th row of a tile.
  // Rows past the context are zero-filled; their address is the last key's (always mapped), so
  // that the copy needs no branch. The page lookup is the loop's main integer work: a division
  // here cost as much as the tile's softmax.
  const int page_shift = kPow2Pages ? __ffs(p.block_size) - 1 : 0;
  auto load_kv = [&](TC* dst, const TC* cache, int n0) {
    constexpr int kRowChunks = kFp8 ? D / 16 : kChunks;  // 16-byte chunks of a cache row
    const int c = tid % kRowChunks;
#pragma unroll
    for (int j = tid / kRowChunks; j < kMmaBlockN; j += kMmaThreads / kRowChunks) {
      const int key = min(n0 + j, kv_end - 1);
      // key is already clamped into the context: no table clamp (kNoBlockClamp folds it away).
      const TC* src = cache +
                      PagedRowOffset(table, LocateKey<kPow2Pages>(key, p.block_size, page_shift), kvh, p.num_kv_heads,
                                     p.block_size, kNoBlockClamp, D) +
                      c * (16 / sizeof(TC));
      if constexpr (kFp8) CpAsync16(dst + j * D + c * 16, src, n0 + j < kv_end);
      else
        CpAsync16(dst + WgmmaTileElem(j, c, kMmaBlockN), src, n0 + j < kv_end);
    }
  };
  // FP8: a landed byte tile -> its T tile (every thread; the caller synchronizes around it).
  auto widen = [&](T* dst, const uint8_t* src) {
    if constexpr (kFp8) {
      constexpr int kRowChunks = D / 16;
#pragma unroll
      for (int i = tid; i < kMmaBlockN * kRowChunks; i += kMmaThreads) {
        const int j = i / kRowChunks, c = i % kRowChunks;
        const uint4 raw = *reinterpret_cast<const uint4*>(src + j * D + c * 16);
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
        uint32_t w[8];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float f[4];
          Fp8x4ToFloat(words[e], f);
          w[2 * e] = MmaTraits<T>::Pack(f[0], f[1]);
          w[2 * e + 1] = MmaTraits<T>::Pack(f[2], f[3]);
        }
        *reinterpret_cast<uint4*>(dst + WgmmaTileElem(j, 2 * c, kMmaBlockN)) =
            make_uint4(w[0], w[1], w[2], w[3]);
        *reinterpret_cast<uint4*>(dst + WgmmaTileElem(j, 2 * c + 1, kMmaBlockN)) =
            make_uint4(w[4], w[5], w[6], w[7]);
      }
    }
  };
  TC* const k_stage = kFp8 ? reinterpret_cast<TC*>(k8_s) : reinterpret_cast<TC*>(k_s);
  TC* const v_stage = kFp8 ? reinterpret_cast<TC*>(v8_s) : reinterpret_cast<TC*>(v_s);
  // An FP8 cache's byte tiles of a key tile travel together, and each is widened while the MMAs
  // run (K(n + 1) under P V(n), V(n) under S(n)), so that the widening does not stand between them.
  load_kv(k_stage, kc, n_first);
  if constexpr (kFp8) load_kv(v_stage, vc, n_first);
  CpAsyncCommit();  // group: Q + K(first) (FP8: + V(first))
  if constexpr (kFp8) {
    CpAsyncWait<0>();
    __syncthreads();
    widen(k_s, k8_s);
  }

  const int warp_row = (warp & 3) * 16;  // of each m-tile
  const int wg_mt = (warp >> 2) * MT;    // the warpgroup's first m-tile
  const float scale = p.scale * kLog2e * (kFp8 ? p.k_scale : 1.0f);
  float m_a[MT], m_b[MT], l_a[MT], l_b[MT];
  float o[MT][kTilesD][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m_a[mt] = m_b[mt] = -INFINITY;
    l_a[mt] = l_b[mt] = 0.0f;
#pragma unroll
    for (int i = 0; i < kTilesD; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
  }

  for (int n0 = n_first; n0 < kv_end; n0 += kMmaBlockN) {
    const bool more = n0 + kMmaBlockN < kv_end;
    if constexpr (!kFp8) {
      load_kv(v_stage, vc, n0);
      CpAsyncCommit();   // group: V(n0)
      CpAsyncWait<1>();  // K(n0) (and Q) have landed
    }
    FenceProxyAsyncShared();  // this thread's writes of Q and K, visible to the MMAs' reads
    __syncthreads();
    // S = Q K^T for the block's rows x 64 keys: per m-tile D / 16 warpgroup MMAs (k16 steps: 32
    // bytes into a 64-column block's 128-byte rows).
    float s[MT][kTilesN][4];
    const uint32_t q_addr = SharedAddress(q_s), k_addr = SharedAddress(k_s);
    WgmmaFence();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float(&sm)[kTilesN * 4] = reinterpret_cast<float(&)[kTilesN * 4]>(s[mt]);
#pragma unroll
      for (int kk = 0; kk < kStepsD; ++kk) {
        const uint32_t col = (kk & 3) * 32;
        const uint64_t a = WgmmaDescSwizzle128(q_addr + ((kk >> 2) * BM + (wg_mt + mt) * 64) * 128 + col);
        const uint64_t b = WgmmaDescSwizzle128(k_addr + (kk >> 2) * kMmaBlockN * 128 + col);
        if (kk == 0)
          WgmmaSs64<kWgmmaType>::RunFirst(sm, a, b);
        else
          WgmmaSs64<kWgmmaType>::Run(sm, a, b, true);
      }
    }
    WgmmaCommit();
    if constexpr (kFp8) widen(v_s, v8_s);  // V(n0)'s bytes landed with K(n0)'s; P V(n0 - 64) is done
    WgmmaWait<0>();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) WgmmaFenceOperands(reinterpret_cast<float(&)[kTilesN * 4]>(s[mt]));
    __syncthreads();  // every warp's MMAs are done with k_s (FP8: every thread with the byte tiles)
    if (more) {
      load_kv(k_stage, kc, n0 + kMmaBlockN);
      if constexpr (kFp8) load_kv(v_stage, vc, n0 + kMmaBlockN);
      CpAsyncCommit();
    }
    // Mask (causal, sliding window) and online softmax in the log2 domain. Tiles wholly below
    // the block's diagonal (every key before its first query, none past the context, no window)
    // need no mask.
    const bool unmasked = p.sliding_window <= 0 && n0 + kMmaBlockN <= min(p0 + row0 + 1, kv_end);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      // Maxima over the raw scores (scale > 0), scaled once: exp2(s * scale - max) is one FFMA
      // and one EX2 per element.
      float mx_a = -INFINITY, mx_b = -INFINITY;
      if (!unmasked) {
        const int ra = (wg_mt + mt) * 64 + warp_row + (lane >> 2);
        const int pos_a = p0 + row0 + ra, pos_b = pos_a + 8;
#pragma unroll
        for (int nt = 0; nt < kTilesN; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = n0 + nt * 8 + 2 * (lane & 3) + (e & 1);
            const int qp = e < 2 ? pos_a : pos_b;
            const bool ok = key <= qp && key < kv_end && (p.sliding_window <= 0 || key > qp - p.sliding_window);
            if (!ok) s[mt][nt][e] = -INFINITY;
          }
        }
      }
#pragma unroll
      for (int nt = 0; nt < kTilesN; ++nt) {
        mx_a = fmaxf(mx_a, fmaxf(s[mt][nt][0], s[mt][nt][1]));
        mx_b = fmaxf(mx_b, fmaxf(s[mt][nt][2], s[mt][nt][3]));
      }
#pragma unroll
      for (int off = 1; off <= 2; off <<= 1) {
        mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, off));
        mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, off));
      }
      const float mn_a = fmaxf(m_a[mt], mx_a * scale), mn_b = fmaxf(m_b[mt], mx_b * scale);
      const float mu_a = mn_a == -INFINITY ? 0.0f : mn_a, mu_b = mn_b == -INFINITY ? 0.0f : mn_b;
      const float corr_a = FastExp2(m_a[mt] - mu_a), corr_b = FastExp2(m_b[mt] - mu_b);
      m_a[mt] = mn_a;
      m_b[mt] = mn_b;
      float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kTilesN; ++nt) {
        s[mt][nt][0] = FastExp2(fmaf(s[mt][nt][0], scale, -mu_a));
        s[mt][nt][1] = FastExp2(fmaf(s[mt][nt][1], scale, -mu_a));
        s[mt][nt][2] = FastExp2(fmaf(s[mt][nt][2], scale, -mu_b));
        s[mt][nt][3] = FastExp2(fmaf(s[mt][nt][3], scale, -mu_b));
        sum_a += s[mt][nt][0] + s[mt][nt][1];
        sum_b += s[mt][nt][2] + s[mt][nt][3];
      }
      l_a[mt] = l_a[mt] * corr_a + sum_a;
      l_b[mt] = l_b[mt] * corr_b + sum_b;
      // Once a row's maximum settles (most tiles of a long prompt) its correction is 1: skip
      // the rescale when it is for every row of the warp.
      if (__any_sync(0xffffffffu, corr_a != 1.0f || corr_b != 1.0f)) {
#pragma unroll
        for (int i = 0; i < kTilesD; ++i) {
          o[mt][i][0] *= corr_a;
          o[mt][i][1] *= corr_a;
          o[mt][i][2] *= corr_b;
          o[mt][i][3] *= corr_b;
        }
      }
    }
    if constexpr (!kFp8) {
      if (more)
        CpAsyncWait<1>();  // V(n0) has landed (K(next) may be in flight)
      else
        CpAsyncWait<0>();
    }
    FenceProxyAsyncShared();  // this thread's writes of V, visible to the MMAs' reads
    __syncthreads();
    // O += P V: P's accumulator fragments, packed, are the A operand as they lie; per m-tile one
    // MMA of all D columns a 16-key step (32 rows of 128 bytes: 2048 bytes into V).
    uint32_t pa[MT][kMmaBlockN / 16][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int kk = 0; kk < kMmaBlockN / 16; ++kk) {
        pa[mt][kk][0] = MmaTraits<T>::Pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pa[mt][kk][1] = MmaTraits<T>::Pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pa[mt][kk][2] = MmaTraits<T>::Pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pa[mt][kk][3] = MmaTraits<T>::Pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
    const uint32_t v_addr = SharedAddress(v_s);
    WgmmaFence();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float(&om)[kTilesD * 4] = reinterpret_cast<float(&)[kTilesD * 4]>(o[mt]);
#pragma unroll
      for (int kk = 0; kk < kMmaBlockN / 16; ++kk)
        WgmmaRs<kWgmmaType, D, /*kTransB=*/true>::Run(
            om, pa[mt][kk], WgmmaDescSwizzle128MnMajor(v_addr + kk * 16 * 128, kMmaBlockN * 128), true);
    }
    WgmmaCommit();
    if constexpr (kFp8) {
      if (more) {  // K(next) widened into k_s, which S(n0) is done with
        CpAsyncWait<0>();
        __syncthreads();
        widen(k_s, k8_s);
      }
    }
    WgmmaWait<0>();
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      WgmmaFenceOperands(reinterpret_cast<float(&)[kTilesD * 4]>(o[mt]));
      WgmmaFenceOperands(reinterpret_cast<uint32_t(&)[kMmaBlockN / 4]>(pa[mt]));
    }
    __syncthreads();  // every warp's MMAs are done with v_s
  }
  CpAsyncWait<0>();

  // Normalize and store (two adjacent columns per register pair).
  T* out = static_cast<T*>(p.out);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    float la = l_a[mt], lb = l_b[mt];
#pragma unroll
    for (int off = 1; off <= 2; off <<= 1) {
      la += __shfl_xor_sync(0xffffffffu, la, off);
      lb += __shfl_xor_sync(0xffffffffu, lb, off);
    }
    const float vs = kFp8 ? p.v_scale : 1.0f;
    const float inv_a = la > 0.0f ? vs / la : 0.0f, inv_b = lb > 0.0f ? vs / lb : 0.0f;
    const int ra = (wg_mt + mt) * 64 + warp_row + (lane >> 2), rb = ra + 8;
#pragma unroll
    for (int dt = 0; dt < kTilesD; ++dt) {
      const int c = dt * 8 + 2 * (lane & 3);
      if (ra < rows_here) {
        T* dst = out + ((static_cast<int64_t>(q_begin) + row0 + ra) * p.num_heads + h) * D + c;
        *reinterpret_cast<uint32_t*>(dst) = MmaTraits<T>::Pack(o[mt][dt][0] * inv_a, o[mt][dt][1] * inv_a);
      }
      if (rb < rows_here) {
        T* dst = out + ((static_cast<int64_t>(q_begin) + row0 + rb) * p.num_heads + h) * D + c;
        *reinterpret_cast<uint32_t*>(dst) = MmaTraits<T>::Pack(o[mt][dt][2] * inv_b, o[mt][dt][3] * inv_b);
      }
    }
  }
}

}  // namespace llm::cuda::attention
