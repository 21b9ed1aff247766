#include <type_traits>

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/norm/fused_rms_norm.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "kernels/cuda/norm/rms_norm_row.cuh"
#include "kernels/cuda/quant/fp8_gemm_scales.cuh"
#include "kernels/cuda/quant/fp8_row_quantize.cuh"

namespace llm::cuda {
namespace {

// One block per row. Pass 1 forms the (residual) row and its sum of squares; pass 2
// (FinishRmsNormRow) normalizes; kQuantize: pass 3 quantizes the stored output for an FP8 linear.
template <typename T, bool kVec16, bool kQuantize>
__global__ void RmsNormKernel(const T* __restrict__ x, T* __restrict__ residual, const T* __restrict__ delta,
                              const T* __restrict__ weight, T* __restrict__ out, int64_t dim, float eps,
                              Fp8RowOutput quantized, Fp8PendingScales /*the held form's*/) {
  AllowDependentLaunch();
  GridDependencyWait();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* src = residual ? residual + row * dim : x + row * dim;
  T* res = residual ? residual + row * dim : nullptr;
  const T* del = delta ? delta + row * dim : nullptr;
  T* o = out + row * dim;
  float sum_sq = 0.0f;
  if (del) {
    sum_sq = AddToRowSumSquares<T, kVec16>(res, dim, [&](int64_t c) {
      if constexpr (kVec16) {
        return LoadVec(del + c * Vec16<T>::kVec);
      } else {
        return del[c];
      }
    });
  } else if constexpr (kVec16) {
    constexpr int kVec = Vec16<T>::kVec;
    for (int64_t c = threadIdx.x; c < dim / kVec; c += blockDim.x) {
      const Vec16<T> v = LoadVec(src + c * kVec);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float f = ToFloat(v.v[e]);
        sum_sq += f * f;
      }
    }
  } else {
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      const float f = ToFloat(src[c]);
      sum_sq += f * f;
    }
  }
  FinishRmsNormRow<T, kVec16>(src, weight, o, dim, sum_sq, eps, scratch);
  if constexpr (kQuantize) QuantizeStoredRowFp8<T, kVec16>(o, row, dim, quantized, scratch);
}

// The vectorized rows held in registers: a thread's chunk j is the row's 16-byte chunk
// threadIdx.x + j * blockDim.x (the walk of AddToRowSumSquares and FinishRmsNormRow, in the same
// order, so every sum and rounding is theirs), loaded once with the weight's before the first use;
// the normalized row is quantized from registers instead of re-read (and with
// quantized.values_unused not stored at all). dim % kVec == 0, aligned. kPending: the delta's
// values come from a W8A8 linear's raw sums (`pending`, fp8_gemm_scales.cuh), `delta` unused.
template <typename T, int kChunks, bool kQuantize, bool kPending>
__global__ void RmsNormHeldKernel(const T* __restrict__ x, T* __restrict__ residual,
                                  const T* __restrict__ delta, const T* __restrict__ weight,
                                  T* __restrict__ out, int64_t dim, float eps, Fp8RowOutput quantized,
                                  Fp8PendingScales pending) {
  AllowDependentLaunch();
  constexpr int kVec = Vec16<T>::kVec;
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, vecs = dim / kVec;
  Vec16<T> w[kChunks];
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {  // no kernel writes the weight: read before the wait
    const int64_t c = threadIdx.x + j * blockDim.x;
    if (c < vecs) w[j] = LoadVec(weight + c * kVec);
  }
  GridDependencyWait();
  const T* src = residual ? residual + row * dim : x + row * dim;
  T* res = residual ? residual + row * dim : nullptr;
  const T* del = delta ? delta + row * dim : nullptr;
  const bool add = kPending || del != nullptr;  // a delta to add: pending sums or a 16-bit row
  Vec16<T> v[kChunks], d[kChunks];
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int64_t c = threadIdx.x + j * blockDim.x;
    if (c < vecs) {
      v[j] = LoadVec(src + c * kVec);
      if constexpr (kPending) {
        const float4* sums = reinterpret_cast<const float4*>(pending.sums + row * dim + c * kVec);
        const float xs = PendingXScale(pending, row);
#pragma unroll
        for (int q = 0; q < kVec / 4; ++q) {
          const float4 s4 = sums[q];
          const float s[4] = {s4.x, s4.y, s4.z, s4.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t col = c * kVec + 4 * q + e;
            d[j].v[4 * q + e] =
                ScaledFp8Sum<T>(s[e], xs, PendingWScale(pending, col), PendingBias<T>(pending, col));
          }
        }
      } else if (del) {
        d[j] = LoadVec(del + c * kVec);
      }
    }
  }
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int64_t c = threadIdx.x + j * blockDim.x;
    if (c >= vecs) continue;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      if (add) v[j].v[e] = FromFloat<T>(ToFloat(v[j].v[e]) + ToFloat(d[j].v[e]));
      const float f = ToFloat(v[j].v[e]);
      sum_sq += f * f;
    }
    if (add) StoreVec(res + c * kVec, v[j]);
  }
  sum_sq = BlockSum(sum_sq, scratch);
  const float inv = rsqrtf(sum_sq / static_cast<float>(dim) + eps);
  T* o = out + row * dim;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int64_t c = threadIdx.x + j * blockDim.x;
    if (c >= vecs) continue;
    v[j] = RmsNormScale(v[j], w[j], inv);
    if (!kQuantize || !quantized.values_unused) StoreVec(o + c * kVec, v[j]);
  }
  if constexpr (kQuantize) QuantizeHeldRowFp8<T, kChunks>(v, row, dim, quantized, scratch);
}

template <typename T, bool kQuantize, bool kPending>
auto RmsNormHeldKernelFor(int chunks) {
  return chunks == 1   ? RmsNormHeldKernel<T, 1, kQuantize, kPending>
         : chunks == 2 ? RmsNormHeldKernel<T, 2, kQuantize, kPending>
         : chunks == 4 ? RmsNormHeldKernel<T, 4, kQuantize, kPending>
                       : RmsNormHeldKernel<T, 8, kQuantize, kPending>;
}

}  // namespace

bool RmsNormTakesPendingDelta(const Fp8PendingScales& p) {
  return p.active() && reinterpret_cast<uintptr_t>(p.sums) % 16 == 0;
}

absl::Status LaunchRmsNorm(DType dtype, const void* x, void* residual, const void* delta, const void* weight,
                           void* out, int64_t rows, int64_t dim, float eps, Stream stream, bool pdl,
                           const Fp8RowOutput* quantized, const Fp8PendingScales* pending_delta) {
  if (rows < 0 || dim <= 0) return absl::InvalidArgumentError("RmsNorm: bad sizes");
  if (rows == 0) return absl::OkStatus();
  if (rows > 0x7fffffff) return absl::InvalidArgumentError("RmsNorm: too many rows");
  if (residual == nullptr && x == nullptr) return absl::InvalidArgumentError("RmsNorm: no input");
  if (quantized != nullptr && !quantized->complete())
    return absl::InvalidArgumentError("RmsNorm: FP8 output needs codes and either per-row or static scales");
  return LLM_DISPATCH_FLOAT(dtype, "RmsNorm", [&] {
    using T = scalar_t;
    constexpr int kVec = Vec16<T>::kVec;
    const bool vec = dim % kVec == 0 && Aligned16(residual ? residual : x) && (!delta || Aligned16(delta)) &&
                     Aligned16(weight) && Aligned16(out) &&
                     (quantized == nullptr || reinterpret_cast<uintptr_t>(quantized->codes) % 8 == 0);
    const int64_t work = vec ? dim / kVec : dim;
    // The held form's walk is also the fused norms' (fused_rms_norm.h): one rule for both.
    const int threads = RmsNormHeldThreads(work);
    // Rows of up to 8 chunks a thread are held in registers (RmsNormHeldKernel), longer ones
    // stored and re-read.
    const int held = vec ? RmsNormHeldChunks(work) : 0;
    const bool pending = pending_delta != nullptr;
    if (pending && (held == 0 || residual == nullptr || !RmsNormTakesPendingDelta(*pending_delta) ||
                    pending_delta->x_scale == nullptr || pending_delta->w_scale == nullptr))
      return absl::InvalidArgumentError(
          "RmsNorm: a delta of pending scales needs a residual and an aligned row "
          "of at most 8 16-byte chunks a thread");
    auto held_kernel = [&](auto quantize) {
      constexpr bool kQuantize = decltype(quantize)::value;
      return pending ? RmsNormHeldKernelFor<T, kQuantize, true>(held)
                     : RmsNormHeldKernelFor<T, kQuantize, false>(held);
    };
    auto kernel = held > 0    ? (quantized ? held_kernel(std::true_type{}) : held_kernel(std::false_type{}))
                  : quantized ? (vec ? RmsNormKernel<T, true, true> : RmsNormKernel<T, false, true>)
                              : (vec ? RmsNormKernel<T, true, false> : RmsNormKernel<T, false, false>);
    CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, dim3(static_cast<unsigned>(rows)), dim3(threads), 0, stream,
                                      pdl, static_cast<const T*>(x), static_cast<T*>(residual),
                                      static_cast<const T*>(delta), static_cast<const T*>(weight),
                                      static_cast<T*>(out), dim, eps, quantized ? *quantized : Fp8RowOutput{},
                                      pending ? *pending_delta : Fp8PendingScales{}));
    return absl::OkStatus();
  });
}

}  // namespace llm::cuda
