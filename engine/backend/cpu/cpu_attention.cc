#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/backend/cpu/cpu_kernels.h"

namespace llm::cpu {

// One (token, head) pair per work item; keys are read straight from the paged cache with an
// online softmax (running max and sum), so no score matrix is materialized.
void PagedAttention(ThreadPool& pool, const AttentionArgs& a) {
  const StepMetadata& m = *a.meta;
  const int heads = a.num_heads, kv_heads = a.num_kv_heads, d = a.head_dim;
  const int group = heads / kv_heads;
  const int64_t block_size = a.cache.block_size();
  const int64_t max_blocks = m.block_tables.dim(1);
  const float* q = a.q.data_as<const float>();
  // An FP8 cache is read back as element * scale, one row at a time into float32.
  const bool fp8 = a.cache.k.dtype() == DType::kF8E4M3;
  auto row = [&](const Tensor& cache, int64_t at, float scale, float* buffer) -> const float* {
    if (!fp8) return cache.data_as<const float>() + at;
    const uint8_t* src = cache.data_as<const uint8_t>() + at;
    for (int i = 0; i < d; ++i) buffer[i] = Fp8E4M3ToFloat(src[i]) * scale;
    return buffer;
  };
  const int32_t* qs = m.query_start.data_as<const int32_t>();
  const int32_t* ctx = m.context_lens.data_as<const int32_t>();
  const int32_t* tables = m.block_tables.data_as<const int32_t>();
  const int32_t* positions = m.positions.data_as<const int32_t>();
  float* out = a.out.data_as<float>();

  pool.ParallelFor(static_cast<int64_t>(m.num_tokens) * heads, 4, [&](int64_t begin, int64_t end, int) {
    float acc[512], k_row[512], v_row[512];
    int seq = 0;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / heads;
      const int h = static_cast<int>(item % heads);
      while (qs[seq + 1] <= t) ++seq;  // items arrive in token order
      const int32_t* table = tables + seq * max_blocks;
      // Causal: a query sees every cached key up to its own position.
      const int64_t last = positions[t];
      LLM_CHECK(last < ctx[seq]);
      const int64_t first = a.sliding_window > 0 ? std::max<int64_t>(0, last - a.sliding_window + 1) : 0;
      const float* qh = q + (t * heads + h) * d;
      const int kvh = h / group;
      float running_max = -std::numeric_limits<float>::infinity();
      float running_sum = 0.0f;
      std::fill(acc, acc + d, 0.0f);
      for (int64_t j = first; j <= last; ++j) {
        const int64_t base = ((static_cast<int64_t>(table[j / block_size]) * kv_heads + kvh) * block_size +
                              j % block_size) * d;
        const float* kj = row(a.cache.k, base, a.cache.k_scale, k_row);
        float s = 0.0f;
        for (int i = 0; i < d; ++i) s += qh[i] * kj[i];
        s *= a.scale;
        const float* vj = row(a.cache.v, base, a.cache.v_scale, v_row);
        if (s > running_max) {
          const float correction = std::exp(running_max - s);
          running_sum *= correction;
          for (int i = 0; i < d; ++i) acc[i] *= correction;
          running_max = s;
        }
        const float p = std::exp(s - running_max);
        running_sum += p;
        for (int i = 0; i < d; ++i) acc[i] += p * vj[i];
      }
      float* o = out + (t * heads + h) * d;
      const float inv = 1.0f / running_sum;
      for (int i = 0; i < d; ++i) o[i] = acc[i] * inv;
    }
  });
}

}  // namespace llm::cpu
