// Fused QKV split + optional per-head q/k RMSNorm + rotary embedding + paged KV-cache write.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"
#include "kernels/cuda/quant/fp8_gemm_scales.h"

namespace llm::cuda {

struct QkvRopeParams {
  const void* qkv = nullptr;        // [T, (H + 2 KVH) * D]: q heads, then k heads, then v heads
  void* q_out = nullptr;            // [T, H * D]
  void* k_cache = nullptr;          // [num_blocks, KVH, block_size, D]
  void* v_cache = nullptr;          // same
  const void* q_norm = nullptr;     // [D] or null
  const void* k_norm = nullptr;     // [D] or null
  const float* inv_freq = nullptr;  // f32 [rotary_dim / 2]
  const int32_t* positions = nullptr;     // [T]
  const int32_t* slot_mapping = nullptr;  // [T]; < 0: do not write K/V
  int64_t num_tokens = 0;
  int32_t num_heads = 0, num_kv_heads = 0, head_dim = 0, rotary_dim = 0;
  int64_t block_size = 0;
  float norm_eps = 1e-6f;
  float attention_scaling = 1.0f;
  // FP8 E4M3 caches (16-bit qkv only): K and V are stored as e4m3(value / scale), the float value
  // after the norm and RoPE, rounded to nearest even and saturated (as the CPU oracle does).
  bool fp8_cache = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  // Set: the projection's values are a W8A8 GEMM's raw sums with their scales still to apply
  // ([T, (H + 2 KVH) * D]; qkv unused), each formed as LaunchApplyFp8GemmScales stores it. Head
  // dims 64 and 128 with full rotary only (QkvRopeTakesPendingScales).
  Fp8PendingScales pending;
};

// Whether LaunchQkvRope takes `p` with pending scales (16-bit activations, aligned operands).
bool QkvRopeTakesPendingScales(const QkvRopeParams& p);

// Rotation is rotate_half: element i < rotary_dim/2 pairs with i + rotary_dim/2; elements at or
// beyond rotary_dim pass through. cos/sin of float(position) * inv_freq[i] in float32.
// `pdl`: launched with programmatic dependent launch (the kernel waits for its predecessor before
// touching memory; only its launch overlaps the predecessor's tail).
absl::Status LaunchQkvRope(DType dtype, const QkvRopeParams& p, Stream stream, bool pdl = false);

}  // namespace llm::cuda
