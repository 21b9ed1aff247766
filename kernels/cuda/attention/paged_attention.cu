#include "kernels/cuda/attention/paged_attention.h"

#include <algorithm>

#include "kernels/cuda/attention/attention_prefill_mma.cuh"
#include "kernels/cuda/attention/attention_simt.cuh"
#include "kernels/cuda/common/cuda_status.h"

namespace llm::cuda {
namespace {

using attention::AttentionCombineKernel;
using attention::AttentionPrefillMmaKernel;
using attention::AttentionSimtKernel;
using attention::SimtSmem;

size_t PartialBytesPerSplit(int64_t num_tokens, int32_t num_heads, int32_t head_dim) {
  return static_cast<size_t>(num_tokens) * num_heads * (static_cast<size_t>(head_dim) * sizeof(float) + sizeof(float2));
}

// Raises a kernel's dynamic shared-memory limit once (needed above 48 KiB).
template <typename Kernel>
cudaError_t AllowSmem(Kernel kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  const cudaError_t err =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) cudaGetLastError();  // reported here; not left for the next launch check
  return err;
}

template <typename T, int G, int kVec>
absl::Status LaunchSimt(const PagedAttentionParams& p, int head_tiles, int splits, void* workspace, bool pdl,
                        Stream stream) {
  const size_t smem = SimtSmem<T, G, kVec>::Bytes(p.head_dim);
  auto kernel = AttentionSimtKernel<T, G, kVec>;
  CUDA_RETURN_IF_ERROR(AllowSmem(kernel, smem));
  float* part_acc = nullptr;
  float2* part_ml = nullptr;
  if (splits > 1) {
    part_acc = static_cast<float*>(workspace);
    part_ml = reinterpret_cast<float2*>(part_acc + p.num_tokens * p.num_heads * splits * p.head_dim);
  }
  const dim3 grid(static_cast<unsigned>(p.num_tokens), p.num_kv_heads * head_tiles, splits);
  CUDA_RETURN_IF_ERROR(
      LaunchKernel(kernel, grid, dim3(attention::kSimtThreads), smem, stream, pdl, p, head_tiles, splits, part_acc, part_ml));
  if (splits > 1) {
    const dim3 cgrid(static_cast<unsigned>(p.num_tokens), p.num_heads);
    const int threads = std::min(128, (p.head_dim + 31) / 32 * 32);
    CUDA_RETURN_IF_ERROR(LaunchKernel(AttentionCombineKernel<T>, cgrid, dim3(threads), 0, stream, pdl,
                                      static_cast<const float*>(part_acc), static_cast<const float2*>(part_ml),
                                      static_cast<T*>(p.out), p.num_heads, p.head_dim, splits));
  }
  return absl::OkStatus();
}

template <typename T, int G>
absl::Status LaunchSimtVec(const PagedAttentionParams& p, bool vec, int head_tiles, int splits, void* workspace,
                           bool pdl, Stream stream) {
  if (vec) return LaunchSimt<T, G, Vec16<T>::kVec>(p, head_tiles, splits, workspace, pdl, stream);
  return LaunchSimt<T, G, 1>(p, head_tiles, splits, workspace, pdl, stream);
}

template <typename T>
absl::Status LaunchTyped(const PagedAttentionParams& p, void* workspace, size_t workspace_bytes,
                         const AttentionOptions& options, Stream stream) {
  const int group = p.num_heads / p.num_kv_heads;
  if constexpr (sizeof(T) == 2) {
    if (p.max_query_len > 1 && !options.force_simt && (p.head_dim == 64 || p.head_dim == 128)) {
      const dim3 grid((p.max_query_len + attention::kMmaBlockM - 1) / attention::kMmaBlockM, p.num_heads,
                      p.num_seqs);
      if (p.head_dim == 64)
        AttentionPrefillMmaKernel<T, 64><<<grid, attention::kMmaThreads, 0, stream>>>(p);
      else
        AttentionPrefillMmaKernel<T, 128><<<grid, attention::kMmaThreads, 0, stream>>>(p);
      CUDA_RETURN_IF_LAUNCH_ERROR();
      return absl::OkStatus();
    }
  }
  int g = 1;  // query heads per block: the group, rounded up to a power of two, at most 8
  while (g < group && g < 8) g *= 2;
  const int head_tiles = (group + g - 1) / g;
  // Decode: split the context so that the grid fills the GPU about four times; bounded by the
  // workspace and by a minimum slice of 128 keys.
  int splits = 1;
  if (p.max_query_len == 1) {
    const int64_t base = p.num_tokens * p.num_kv_heads * head_tiles;
    if (options.force_splits > 0) {
      splits = options.force_splits;
    } else {
      splits = static_cast<int>(std::max<int64_t>(1, (4 * options.num_sms + base - 1) / base));
      splits = std::min(splits, std::max(1, (p.max_context_len + 127) / 128));
    }
    const size_t per_split = PartialBytesPerSplit(p.num_tokens, p.num_heads, p.head_dim);
    const size_t fit = workspace ? workspace_bytes / per_split : 0;
    splits = static_cast<int>(std::min<size_t>(std::min<size_t>(splits, fit), 65535));
    if (splits < 1) splits = 1;
  }
  constexpr int kVec = Vec16<T>::kVec;
  const bool vec = p.head_dim % kVec == 0 && Aligned16(p.k_cache) && Aligned16(p.v_cache);
  switch (g) {
    case 1: return LaunchSimtVec<T, 1>(p, vec, head_tiles, splits, workspace, options.pdl, stream);
    case 2: return LaunchSimtVec<T, 2>(p, vec, head_tiles, splits, workspace, options.pdl, stream);
    case 4: return LaunchSimtVec<T, 4>(p, vec, head_tiles, splits, workspace, options.pdl, stream);
    default: return LaunchSimtVec<T, 8>(p, vec, head_tiles, splits, workspace, options.pdl, stream);
  }
}

}  // namespace

size_t AttentionWorkspaceBytes(int64_t num_tokens, int32_t num_heads, int32_t head_dim, int32_t max_splits) {
  return PartialBytesPerSplit(num_tokens, num_heads, head_dim) * static_cast<size_t>(max_splits);
}

absl::Status LaunchPagedAttention(DType dtype, const PagedAttentionParams& p, void* workspace, size_t workspace_bytes,
                                  const AttentionOptions& options, Stream stream) {
  if (p.num_tokens < 0 || p.num_seqs < 0 || p.num_kv_heads <= 0 || p.num_heads <= 0 ||
      p.num_heads % p.num_kv_heads != 0 || p.head_dim <= 0 || p.head_dim > attention::kSimtMaxHeadDim ||
      p.block_size <= 0 || p.max_blocks_per_seq <= 0)
    return absl::InvalidArgumentError(absl::StrCat("Attention: unsupported shape (heads ", p.num_heads, ", kv heads ",
                                                   p.num_kv_heads, ", head_dim ", p.head_dim, ", block_size ",
                                                   p.block_size, "); head_dim <= 256"));
  if (p.num_tokens == 0 || p.num_seqs == 0) return absl::OkStatus();
  if (p.num_tokens > 0x7fffffff || p.num_seqs > 65535 || p.max_query_len <= 0)
    return absl::InvalidArgumentError("Attention: step too large or empty queries");
  return LLM_DISPATCH_FLOAT(dtype, "Attention",
                            [&] { return LaunchTyped<scalar_t>(p, workspace, workspace_bytes, options, stream); });
}

}  // namespace llm::cuda
