// Float32 reference kernels of the CPU backend: plain loops over plain pointers, split across the
// thread pool. Written for clarity first; the inner loops are shaped so the compiler vectorizes
// them (independent accumulators, unit-stride).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/backend/cpu/thread_pool.h"

namespace llm::cpu {

// y[M, N] = x[M, K] · w[N, K]ᵀ (+ bias[N]).
void Matmul(ThreadPool& pool, const float* x, const float* w, const float* bias, float* y, int64_t m,
            int64_t n, int64_t k);

// The same with FP8 E4M3 weights: each element is dequantized to float32 (e4m3 value times its
// scale, `grid` locating the scale, one rounding as in the references) before the product.
void MatmulFp8(ThreadPool& pool, const float* x, const uint8_t* w, const float* scale, const ScaleGrid& grid,
               const float* bias, float* y, int64_t m, int64_t n, int64_t k);

// The same with int4 weights in the repacked layout (engine/core/int4_layout.h): each weight row
// is dequantized to float32 in storage order ((code - zero) * scale) before the product. `x` has
// the storage's columns: the caller applies an act-order permutation first (GatherInt4Input).
void MatmulInt4(ThreadPool& pool, const float* x, const Int4View& w, const float* bias, float* y, int64_t m);
// out[r, j] = x[r, perm[j]] (0 where perm[j] < 0) for x [m, k], out [m, kp].
void GatherInt4Input(ThreadPool& pool, const float* x, const int32_t* perm, int64_t m, int64_t k, int64_t kp,
                     float* out);

// out = e4m3(x / s) * s for x [rows, cols]: what a W8A8 kernel's input quantization keeps, in
// float32. The scale s per `quant`: Fp8ScaleForAmax of each row (kDynamicPerToken) or of each
// row's `group`-column groups (kDynamicPerGroup), or `static_scale` (kStaticPerTensor).
void FakeQuantizeFp8(ThreadPool& pool, const float* x, float* out, int64_t rows, int64_t cols,
                     ActivationQuant quant, int32_t group, float static_scale);

// codes = e4m3(x / s) for x [rows, cols], with s per row: Fp8ScaleForAmax of the row (written to
// scales[row]) for kDynamicPerToken, `static_scale` for kStaticPerTensor (scales not written). The
// codes FakeQuantizeFp8 keeps, as stored (Fp8Input).
void QuantizeFp8Rows(ThreadPool& pool, const float* x, uint8_t* codes, float* scales, int64_t rows, int64_t cols,
                     ActivationQuant quant, float static_scale);
// out = code * s, the inverse of QuantizeFp8Rows (same `quant`, scales and static_scale).
void DequantizeFp8Rows(ThreadPool& pool, const uint8_t* codes, const float* scales, float* out, int64_t rows,
                       int64_t cols, ActivationQuant quant, float static_scale);

void RmsNormRows(ThreadPool& pool, const float* x, const float* weight, float eps, float* out,
                 int64_t rows, int64_t dim, float* residual_in_out, const float* delta);

// Both take a float32 or FP8 E4M3 cache (KvCacheLayer's scales).
void QkvRope(ThreadPool& pool, const QkvRopeArgs& args);

void PagedAttention(ThreadPool& pool, const AttentionArgs& args);

// Per-thread working memory of the sampler, grown on first use and then reused.
struct SamplerScratch {
  std::vector<float> values;
  std::vector<int32_t> order;
  std::vector<int32_t> counts;
};

void SampleRows(ThreadPool& pool, const float* logits, int64_t vocab, absl::Span<const SampleRow> rows,
                absl::Span<SampleResult> results, std::vector<SamplerScratch>& scratch);

}  // namespace llm::cpu
