// Internal: QkvRope as the end of the QKV projection's GEMV (GemvOptions::rope, the FP8 register
// form; GemvW4A16MmaOptions::rope, the int4 one), so that the projection's outputs go through the
// norm-free rotary embedding straight into q and the KV cache: one kernel, one dependency wait and
// the qkv tensor's round trip less a layer. The GEMV's blocks pair rotation partners (rows i and
// i + D / 2 of a head; RopeGemvRow for the FP8 form). Each output is rounded to T as the qkv
// tensor would hold it, then rotated and stored with QkvRopeFullKernel's arithmetic
// (qkv_rope.cu), so that the fusion changes no bit.
#pragma once

#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/fp8.cuh"
#include "kernels/cuda/gemm/gemv_register_finish.cuh"
#include "kernels/cuda/rope/qkv_rope.h"

namespace llm::cuda {

// The FP8 register form: block b holds pairs p0 .. p0 + 3 of head b / (D / 8) (p0 = 4 (b % (D / 8))),
// warps 0-3 the rows of elements p0 + w and warps 4-7 those of elements p0 + w + D / 2.
__device__ __forceinline__ int RopeGemvRow(int block, int warp, int head_dim) {
  const int blocks_per_head = head_dim / 8;
  const int head = block / blocks_per_head, p0 = (block % blocks_per_head) * 4;
  return head * head_dim + (warp < 4 ? 0 : head_dim / 2) + p0 + (warp & 3);
}

// Element i < D / 2 of a rotated head and its partner i + D / 2, from their unrotated values
// (QkvRopeFullKernel's expressions; cos/sin of the position times inv_freq[i], scaled).
__device__ __forceinline__ void RotatePair(const QkvRopeParams& p, int64_t token, int i, float lo, float hi,
                                           float* out_lo, float* out_hi) {
  float s, c;
  sincosf(static_cast<float>(p.positions[token]) * p.inv_freq[i], &s, &c);
  const float cs = c * p.attention_scaling, sn = s * p.attention_scaling;
  *out_lo = __fsub_rn(__fmul_rn(lo, cs), __fmul_rn(hi, sn));
  *out_hi = __fadd_rn(__fmul_rn(hi, cs), __fmul_rn(lo, sn));
}

// Head hh's elements e < D / 2 and e + D / 2 of `token`, as the qkv tensor would hold them (lo,
// hi): rotated (query and key heads) and stored into q_out or the KV cache as QkvRopeFullKernel
// stores them.
template <typename T>
__device__ __forceinline__ void StoreRotatedPair(const QkvRopeParams& p, int token, int hh, int e, float lo, float hi) {
  const int d = p.head_dim, half = d / 2;
  const int heads = p.num_heads, kv_heads = p.num_kv_heads;
  const bool is_q = hh < heads, is_k = !is_q && hh < heads + kv_heads;
  const int32_t slot = p.slot_mapping[token];
  if (!is_q && slot < 0) return;  // K/V of a token whose write is skipped
  if (is_q || is_k) RotatePair(p, token, e, lo, hi, &lo, &hi);
  if (is_q) {
    T* q = static_cast<T*>(p.q_out) + (static_cast<int64_t>(token) * heads + hh) * d;
    q[e] = FromFloat<T>(lo);
    q[e + half] = FromFloat<T>(hi);
    return;
  }
  const int h = is_k ? hh - heads : hh - heads - kv_heads;
  const int64_t at = ((slot / p.block_size * kv_heads + h) * p.block_size + slot % p.block_size) * d;
  if (p.fp8_cache) {
    const float cache_scale = is_k ? p.k_scale : p.v_scale;
    uint8_t* c = static_cast<uint8_t*>(is_k ? p.k_cache : p.v_cache) + at;
    c[e] = FloatToFp8(lo / cache_scale);
    c[e + half] = FloatToFp8(hi / cache_scale);
  } else {
    T* c = static_cast<T*>(is_k ? p.k_cache : p.v_cache) + at;
    c[e] = FromFloat<T>(lo);
    c[e + half] = FromFloat<T>(hi);
  }
}

template <int M, int kWarps, typename T>
__device__ __forceinline__ void FinishRegisterGemvRope(float (&acc)[M], float scale, int warp, int lane, int row,
                                                       int m_rows, const T* __restrict__ bias, const QkvRopeParams& p,
                                                       float (&partial)[kWarps][M]) {
  PairedRowSums<M, kWarps, T>(acc, scale, warp, lane, row, bias, partial);  // four rotation pairs a block
  const int i = threadIdx.x;
  if (i >= 4 * M) return;
  const int j = i / M, token = i % M;
  if (token >= m_rows) return;
  const int blocks_per_head = p.head_dim / 8;
  StoreRotatedPair<T>(p, token, blockIdx.x / blocks_per_head, (blockIdx.x % blocks_per_head) * 4 + j, partial[j][token],
                      partial[4 + j][token]);
}

}  // namespace llm::cuda
