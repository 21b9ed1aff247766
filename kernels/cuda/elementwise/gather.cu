#include "kernels/cuda/elementwise/gather.h"

#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {
namespace {

// One block per output row; 16-byte chunks when the row width allows it.
template <typename T>
__global__ void GatherKernel(const T* __restrict__ src, int64_t src_rows, int64_t width,
                             const int32_t* __restrict__ idx, int64_t offset, T* __restrict__ out, bool vec) {
  AllowDependentLaunch();
  const int64_t r = blockIdx.x;
  const int64_t s = static_cast<int64_t>(idx[r]) - offset;
  const bool valid = s >= 0 && s < src_rows;
  T* o = out + r * width;
  const T* in = src + (valid ? s : 0) * width;
  if (vec) {
    constexpr int kVec = Vec16<T>::kVec;
    Vec16<T> zero;
#pragma unroll
    for (int e = 0; e < kVec; ++e) zero.v[e] = FromFloat<T>(0.0f);
    for (int64_t c = threadIdx.x; c < width / kVec; c += blockDim.x)
      StoreVec(o + c * kVec, valid ? LoadVec(in + c * kVec) : zero);
  } else {
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) o[c] = valid ? in[c] : FromFloat<T>(0.0f);
  }
}

absl::Status Gather(const char* op, DType dtype, const void* src, int64_t src_rows, int64_t width,
                    const int32_t* idx, int64_t n, int64_t offset, void* out, Stream stream) {
  if (src_rows < 0 || width <= 0 || n < 0) return absl::InvalidArgumentError(absl::StrCat(op, ": bad sizes"));
  if (n == 0) return absl::OkStatus();
  if (n > 0x7fffffff) return absl::InvalidArgumentError(absl::StrCat(op, ": too many rows"));
  return LLM_DISPATCH_FLOAT(dtype, op, [&] {
    constexpr int kVec = Vec16<scalar_t>::kVec;
    const bool vec = width % kVec == 0 && Aligned16(src) && Aligned16(out);
    const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, vec ? width / kVec : width)));
    GatherKernel<scalar_t><<<static_cast<unsigned>(n), threads, 0, stream>>>(
        static_cast<const scalar_t*>(src), src_rows, width, idx, offset, static_cast<scalar_t*>(out), vec);
    CUDA_RETURN_IF_LAUNCH_ERROR();
    return absl::OkStatus();
  });
}

}  // namespace

absl::Status LaunchEmbedding(DType dtype, const void* table, int64_t table_rows, int64_t dim, const int32_t* ids,
                             int64_t num_ids, int64_t vocab_offset, void* out, Stream stream) {
  return Gather("Embedding", dtype, table, table_rows, dim, ids, num_ids, vocab_offset, out, stream);
}

absl::Status LaunchGatherRows(DType dtype, const void* x, int64_t x_rows, int64_t width, const int32_t* rows,
                              int64_t num_rows, void* out, Stream stream) {
  return Gather("GatherRows", dtype, x, x_rows, width, rows, num_rows, 0, out, stream);
}

}  // namespace llm::cuda
