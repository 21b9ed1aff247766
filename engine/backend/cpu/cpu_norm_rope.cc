#include <algorithm>
#include <cmath>

#include "engine/backend/cpu/cpu_kernels.h"

namespace llm::cpu {
namespace {

// Hugging Face's RMSNorm: accumulate in float32, multiply by the weight after normalizing.
inline void RmsNormRow(const float* x, const float* weight, float eps, float* out, int64_t dim) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float inv = 1.0f / std::sqrt(static_cast<float>(sum_sq / dim) + eps);
  for (int64_t i = 0; i < dim; ++i) out[i] = weight[i] * (x[i] * inv);
}

}  // namespace

void RmsNormRows(ThreadPool& pool, const float* x, const float* weight, float eps, float* out,
                 int64_t rows, int64_t dim, float* residual, const float* delta) {
  pool.ParallelFor(rows, 8, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* src = x ? x + r * dim : nullptr;
      if (residual) {  // residual += delta; normalize the sum
        float* res = residual + r * dim;
        if (delta)
          for (int64_t i = 0; i < dim; ++i) res[i] += delta[r * dim + i];
        src = res;
      }
      RmsNormRow(src, weight, eps, out + r * dim, dim);
    }
  });
}

void QkvRope(ThreadPool& pool, const QkvRopeArgs& a) {
  const int64_t t_count = a.qkv.dim(0);
  const int heads = a.num_heads, kv_heads = a.num_kv_heads, d = a.head_dim;
  const int64_t row = static_cast<int64_t>(heads + 2 * kv_heads) * d;
  const float* qkv = a.qkv.data_as<const float>();
  const float* inv_freq = a.rope.inv_freq.data_as<const float>();
  const int32_t* pos = a.positions.data_as<const int32_t>();
  const int32_t* slots = a.slot_mapping.data_as<const int32_t>();
  const int half = a.rope.rotary_dim / 2;
  const int64_t block_size = a.cache.block_size();
  // An FP8 cache stores value / scale (rounded to nearest even, saturated); a float32 one the value.
  const bool fp8 = a.cache.k.dtype() == DType::kF8E4M3;
  auto store = [&](const Tensor& cache, int64_t at, const float* src, float scale) {
    if (!fp8) {
      std::copy(src, src + d, cache.data_as<float>() + at);
      return;
    }
    uint8_t* dst = cache.data_as<uint8_t>() + at;
    for (int i = 0; i < d; ++i) dst[i] = FloatToFp8E4M3(src[i] / scale);
  };
  float* q_out = a.q_out.data_as<float>();
  const float* qn = a.q_norm.empty() ? nullptr : a.q_norm.data_as<const float>();
  const float* kn = a.k_norm.empty() ? nullptr : a.k_norm.data_as<const float>();

  pool.ParallelFor(t_count, 4, [&](int64_t begin, int64_t end, int) {
    float cos_v[512], sin_v[512], tmp[1024], rotated[512];
    for (int64_t t = begin; t < end; ++t) {
      // As Hugging Face: angle = float(position) * inv_freq in float32, then cos/sin.
      const float p = static_cast<float>(pos[t]);
      for (int i = 0; i < half; ++i) {
        const float angle = p * inv_freq[i];
        cos_v[i] = static_cast<float>(std::cos(static_cast<double>(angle))) * a.rope.attention_scaling;
        sin_v[i] = static_cast<float>(std::sin(static_cast<double>(angle))) * a.rope.attention_scaling;
      }
      auto rotate = [&](const float* src, const float* norm_w, float* dst) {
        if (norm_w) {
          RmsNormRow(src, norm_w, a.norm_eps, tmp, d);
          src = tmp;
        }
        for (int i = 0; i < half; ++i) {
          const float x1 = src[i], x2 = src[i + half];
          dst[i] = x1 * cos_v[i] - x2 * sin_v[i];
          dst[i + half] = x2 * cos_v[i] + x1 * sin_v[i];
        }
        for (int i = 2 * half; i < d; ++i) dst[i] = src[i];  // partial rotary: pass-through
      };
      const float* r = qkv + t * row;
      for (int h = 0; h < heads; ++h) rotate(r + h * d, qn, q_out + (t * heads + h) * d);
      const int32_t slot = slots[t];
      if (slot < 0) continue;
      const int64_t block = slot / block_size, offset = slot % block_size;
      for (int h = 0; h < kv_heads; ++h) {
        const int64_t dst = ((block * kv_heads + h) * block_size + offset) * d;
        rotate(r + (heads + h) * d, kn, rotated);
        store(a.cache.k, dst, rotated, a.cache.k_scale);
        store(a.cache.v, dst, r + (heads + kv_heads + h) * d, a.cache.v_scale);
      }
    }
  });
}

}  // namespace llm::cpu
