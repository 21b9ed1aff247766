// Matrix-vector products for decode: out[M, N] = x[M, K] · W[N, K]ᵀ (+ bias) for small M
// (<= kGemvMaxRows). Memory-bound: each warp streams one weight row with 16-byte loads (several in
// flight per lane) and reuses it for all M input rows; accumulation in float32.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

inline constexpr int kGemvMaxRows = 8;

// x, w, bias of `dtype`; out of `out_dtype` (== dtype, or f32). `pdl`: launch with programmatic
// dependent launch, so the weight prefetch overlaps the previous kernel's tail.
absl::Status LaunchGemv(DType dtype, DType out_dtype, const void* x, const void* w, const void* bias, void* out,
                        int64_t m, int64_t n, int64_t k, bool pdl, Stream stream);

}  // namespace llm::cuda
