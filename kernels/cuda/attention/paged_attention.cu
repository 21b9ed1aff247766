#include <algorithm>
#include <type_traits>
#include <utility>

#include "kernels/cuda/attention/attention_decode.cuh"
#include "kernels/cuda/attention/attention_decode_mma.cuh"
#include "kernels/cuda/attention/attention_prefill_mma.cuh"
#include "kernels/cuda/attention/attention_simt.cuh"
#include "kernels/cuda/attention/paged_attention.h"
#include "kernels/cuda/common/cuda_status.h"
#include "kernels/cuda/common/dynamic_smem.h"

namespace llm::cuda {
namespace {

using attention::AttentionCombineKernel;
using attention::AttentionDecodeKernel;
using attention::AttentionDecodeMmaKernel;
using attention::AttentionPrefillMmaKernel;
using attention::AttentionSimtKernel;
using attention::DecodeMmaSmem;
using attention::DecodeSmem;
using attention::DecodeSplit;
using attention::SimtSmem;

size_t PartialBytesPerSplit(int64_t num_tokens, int32_t num_heads, int32_t head_dim) {
  return static_cast<size_t>(num_tokens) * num_heads *
         (static_cast<size_t>(head_dim) * sizeof(float) + sizeof(float2));
}

// The workspace starts with the decode kernel's arrival counters (zero between calls), then the
// split-K partials of `splits` slices.
constexpr size_t kArrivalCounters = 4096;  // (token, KV head, head tile) rows a split launch may have
constexpr size_t kArrivalBytes = kArrivalCounters * sizeof(unsigned);

void PlacePartials(const PagedAttentionParams& p, void* workspace, DecodeSplit* split) {
  if (split->splits <= 1) return;
  split->arrivals = static_cast<unsigned*>(workspace);
  split->part_acc = reinterpret_cast<float*>(static_cast<char*>(workspace) + kArrivalBytes);
  split->part_ml =
      reinterpret_cast<float2*>(split->part_acc + p.num_tokens * p.num_heads * split->splits * p.head_dim);
}

// Merges the decode slices (nothing to do without a split).
template <typename T>
absl::Status LaunchCombine(const PagedAttentionParams& p, const DecodeSplit& split, bool pdl, Stream stream) {
  if (split.splits <= 1) return absl::OkStatus();
  const dim3 grid(static_cast<unsigned>(p.num_tokens), p.num_heads);
  const int threads = std::min(128, (p.head_dim + 31) / 32 * 32);
  CUDA_RETURN_IF_ERROR(LaunchKernel(AttentionCombineKernel<T>, grid, dim3(threads), 0, stream, pdl,
                                    static_cast<const float*>(split.part_acc),
                                    static_cast<const float2*>(split.part_ml), static_cast<T*>(p.out),
                                    p.num_heads, p.head_dim, split.splits));
  return absl::OkStatus();
}

// Slices that fit the workspace (at least 1).
int FitSplits(const PagedAttentionParams& p, int splits, void* workspace, size_t workspace_bytes) {
  const size_t fit = workspace && workspace_bytes > kArrivalBytes
                         ? (workspace_bytes - kArrivalBytes) / PartialBytesPerSplit(p.num_tokens, p.num_heads, p.head_dim)
                         : 0;
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(std::min<size_t>(splits, fit), 65535)));
}

// --- the SIMT kernel (any dtype and head_dim; decode of other shapes, prefill fallback) ---

template <typename T, int G, int kVec>
absl::Status LaunchSimt(const PagedAttentionParams& p, DecodeSplit split, void* workspace, bool pdl,
                        Stream stream) {
  const size_t smem = SimtSmem<T, G, kVec>::Bytes(p.head_dim);
  auto kernel = p.fp8_cache ? AttentionSimtKernel<T, G, kVec, true> : AttentionSimtKernel<T, G, kVec, false>;
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(kernel, smem));
  PlacePartials(p, workspace, &split);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), p.num_kv_heads * split.head_tiles, split.splits);
  CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, grid, dim3(attention::kSimtThreads), smem, stream, pdl, p,
                                    split.head_tiles, split.splits, split.part_acc, split.part_ml));
  return LaunchCombine<T>(p, split, pdl, stream);
}

template <typename T, int G>
absl::Status LaunchSimtVec(const PagedAttentionParams& p, bool vec, const DecodeSplit& split, void* workspace,
                           bool pdl, Stream stream) {
  if (vec) return LaunchSimt<T, G, Vec16<T>::kVec>(p, split, workspace, pdl, stream);
  return LaunchSimt<T, G, 1>(p, split, workspace, pdl, stream);
}

// SIMT decode: split the context so that the grid fills the GPU about four times, slices of at
// least 128 keys (each block sizes its own slice from its sequence's length).
DecodeSplit ChooseSimtSplit(const PagedAttentionParams& p, const AttentionOptions& options, int head_tiles,
                            void* workspace, size_t workspace_bytes) {
  DecodeSplit split;
  split.head_tiles = head_tiles;
  if (p.max_query_len != 1) return split;
  const int64_t base = p.num_tokens * p.num_kv_heads * head_tiles;
  int splits = options.force_splits;
  if (splits <= 0) {
    splits = static_cast<int>(std::max<int64_t>(1, (4 * options.num_sms + base - 1) / base));
    splits = std::min(splits, std::max(1, (p.max_context_len + 127) / 128));
  }
  split.splits = FitSplits(p, splits, workspace, workspace_bytes);
  return split;
}

// --- the decode kernel (16-bit, head_dim 64 or 128, one query token per sequence) ---

// The split is for the GPU's idle SMs only: no more slices than leave every (token, KV head)
// block a place of its own (`blocks_per_sm` of them an SM), and none shorter than `min_chunk` keys
// (H100, batch 1, 8B heads, warp kernel: 2048 keys in 8 slices of 256 take 10.3 us, in 4 of 512
// 14.6 us; 512 keys in 2 slices 9.8 us, in one 11.7 us). The count is for the longest context the
// call may see (for a CUDA graph, the longest the graph serves); each sequence uses as many of the
// slices as its own context needs (MergeDecodeWarps).
DecodeSplit ChooseDecodeSplit(const PagedAttentionParams& p, const AttentionOptions& options, int head_tiles,
                              int min_chunk, int blocks_per_sm, int max_splits, void* workspace,
                              size_t workspace_bytes) {
  DecodeSplit split;
  split.head_tiles = head_tiles;
  const int keys = p.sliding_window > 0 ? std::min(p.max_context_len, p.sliding_window) : p.max_context_len;
  const int64_t base = p.num_tokens * p.num_kv_heads * head_tiles;
  if (options.force_splits > 0) min_chunk = 32;
  const int wanted = options.force_splits > 0
                         ? options.force_splits
                         : static_cast<int>(std::min<int64_t>(int64_t{blocks_per_sm} * options.num_sms / base, 65535));
  int splits = std::min({wanted, (keys + min_chunk - 1) / min_chunk, max_splits});
  if (base > static_cast<int64_t>(kArrivalCounters)) splits = 1;
  split.splits = FitSplits(p, splits, workspace, workspace_bytes);
  split.min_chunk = min_chunk;
  return split;
}

// Shared memory that leaves room for no more than two blocks an SM (sm_90: 228 KB an SM, 1 KB of
// it reserved a block).
constexpr size_t kTwoBlocksAnSmBytes = 77 * 1024;

// A decode kernel over its grid: (KV head x head tile, token, slice), or (token, KV head x head
// tile, slice) past 65535 tokens (DecodeSplit::heads_fastest); it merges its own slices.
// `two_an_sm`: its shared memory raised so that at most two blocks share an SM.
absl::Status LaunchDecodeGrid(void (*kernel)(PagedAttentionParams, DecodeSplit), int threads, size_t smem,
                              const PagedAttentionParams& p, const AttentionOptions& options, DecodeSplit split,
                              void* workspace, Stream stream, bool two_an_sm = false) {
  if (two_an_sm) smem = std::max(smem, kTwoBlocksAnSmBytes);
  CUDA_RETURN_IF_ERROR(AllowDynamicSmem(kernel, smem));
  PlacePartials(p, workspace, &split);
  split.heads_fastest = p.num_tokens <= 65535;
  const dim3 grid =
      split.heads_fastest
          ? dim3(p.num_kv_heads * split.head_tiles, static_cast<unsigned>(p.num_tokens), split.splits)
          : dim3(static_cast<unsigned>(p.num_tokens), p.num_kv_heads * split.head_tiles, split.splits);
  CUDA_RETURN_IF_ERROR(LaunchKernel(kernel, grid, dim3(threads), smem, stream, options.pdl, p, split));
  return absl::OkStatus();
}

// The warp kernel: a block covers 256 keys per step (8 warps x 32).
template <typename T, int G, int D>
absl::Status LaunchDecode(const PagedAttentionParams& p, const AttentionOptions& options, int head_tiles,
                          void* workspace, size_t workspace_bytes, Stream stream) {
  DecodeSplit split = ChooseDecodeSplit(p, options, head_tiles, attention::kDecodeKeysPerBlockStep, 1,
                                        attention::kDecodeMaxSplits, workspace, workspace_bytes);
  // When the (token, KV head) blocks alone fill every SM, occupancy counts more than hiding each
  // warp's V latency: the 128-register variant (two blocks per SM).
  const bool v_smem = p.num_tokens * p.num_kv_heads * split.head_tiles >= options.num_sms;
  auto kernel = p.fp8_cache ? (v_smem ? AttentionDecodeKernel<T, G, D, true, true> : AttentionDecodeKernel<T, G, D, false, true>)
                            : (v_smem ? AttentionDecodeKernel<T, G, D, true> : AttentionDecodeKernel<T, G, D, false>);
  return LaunchDecodeGrid(kernel, attention::kDecodeThreads, DecodeSmem<T, G, D>::kBytes, p, options, split, workspace,
                          stream);
}

// The tensor-core kernel: two blocks an SM, 64 keys a block step (4 warps x 16); slices of at
// least 128 keys.
template <typename T, int G, int D>
absl::Status LaunchDecodeMma(const PagedAttentionParams& p, const AttentionOptions& options, int head_tiles,
                             void* workspace, size_t workspace_bytes, Stream stream) {
  // Over a 16-bit cache, (token, KV head) rows that alone come within a sixteenth of one block an SM
  // take no split, by measurement in the step (H200, 8B step at batch 16, 128 rows on 132 SMs, one
  // slice against the two below: bf16 -0.6% to -1.2%, int4 -1.4% to -2.8%; an FP8 cache's two
  // slices were 1.8-2.1% faster, and at 96 rows (batch 12) one slice was level;
  // benchmarks/RESULTS.md). Likely why: the slices' merge and the second block an SM cost more than
  // the one-block grid's four idle SMs.
  const int64_t rows = p.num_tokens * p.num_kv_heads * head_tiles;
  const int blocks_per_sm = !p.fp8_cache && rows * 16 >= int64_t{options.num_sms} * 15 ? 1 : 2;
  DecodeSplit split =
      ChooseDecodeSplit(p, options, head_tiles, 2 * attention::kDecodeMmaKeysPerBlockStep, blocks_per_sm,
                        attention::kDecodeMmaMaxSplits, workspace, workspace_bytes);
  constexpr int kThreads = attention::kDecodeMmaThreads;
  // Where registers and shared memory let more than two blocks share an SM (an FP8 cache's smaller
  // tiles, 48 KB: four with O transposed, held to 128 registers; three with O as the 16-bit cache
  // keeps it, 162 registers), they pay only for grids of at least two waves of three: a smaller
  // grid is placed unevenly (three on some SMs, one on others: the split above assumes two) or
  // leaves a last wave mostly empty. H100, FP8 cache, 8B heads (attention_bench): three an SM took
  // 10-12% longer at 8-64 sequences of 1k keys (64-512 blocks), 1-5% less at 128-512 sequences.
  const int64_t blocks = p.num_tokens * p.num_kv_heads * head_tiles * split.splits;
  const bool two_an_sm = options.decode_blocks_per_sm == 2 ||
                         (options.decode_blocks_per_sm == 0 && blocks < 6 * int64_t{options.num_sms});
  if (p.fp8_cache)
    return LaunchDecodeGrid(options.decode_fp8_transposed_o ? AttentionDecodeMmaKernel<T, G, D, true, true>
                                                            : AttentionDecodeMmaKernel<T, G, D, true, false>,
                            kThreads, DecodeMmaSmem<T, G, D, true>::kBytes, p, options, split, workspace,
                            stream, two_an_sm);
  return LaunchDecodeGrid(AttentionDecodeMmaKernel<T, G, D, false, false>, kThreads,
                          DecodeMmaSmem<T, G, D, false>::kBytes, p, options, split, workspace, stream,
                          two_an_sm);
}

template <typename T, int G>
absl::Status LaunchDecodeDim(const PagedAttentionParams& p, const AttentionOptions& options, int head_tiles,
                             void* workspace, size_t workspace_bytes, Stream stream) {
  if (options.decode_kernel == DecodeKernel::kWarp) {
    if (p.head_dim == 64) return LaunchDecode<T, G, 64>(p, options, head_tiles, workspace, workspace_bytes, stream);
    return LaunchDecode<T, G, 128>(p, options, head_tiles, workspace, workspace_bytes, stream);
  }
  if (p.head_dim == 64) return LaunchDecodeMma<T, G, 64>(p, options, head_tiles, workspace, workspace_bytes, stream);
  return LaunchDecodeMma<T, G, 128>(p, options, head_tiles, workspace, workspace_bytes, stream);
}

template <typename T>
absl::Status LaunchTyped(const PagedAttentionParams& p, void* workspace, size_t workspace_bytes,
                         const AttentionOptions& options, Stream stream) {
  const int group = p.num_heads / p.num_kv_heads;
  int g = 1;  // query heads per block: the group, rounded up to a power of two, at most 8
  while (g < group && g < 8) g *= 2;
  const int head_tiles = (group + g - 1) / g;
  if constexpr (sizeof(T) == 2) {
    const bool mma_dim = p.head_dim == 64 || p.head_dim == 128;
    if (p.max_query_len > 1 && !options.force_simt && mma_dim && p.num_decode_seqs > 0 &&
        p.num_decode_seqs < p.num_seqs) {
      // A mixed step: the leading decodes (token s is sequence s) as a decode call, the rest (their
      // query rows stay absolute through query_start) as a prefill call.
      PagedAttentionParams decode = p;
      decode.num_seqs = decode.num_decode_seqs = p.num_decode_seqs;
      decode.num_tokens = p.num_decode_seqs;
      decode.max_query_len = 1;
      PagedAttentionParams prefill = p;
      prefill.num_seqs = p.num_seqs - p.num_decode_seqs;
      prefill.num_decode_seqs = 0;
      prefill.query_start = p.query_start + p.num_decode_seqs;
      prefill.context_lens = p.context_lens + p.num_decode_seqs;
      prefill.block_tables = p.block_tables + static_cast<int64_t>(p.num_decode_seqs) * p.max_blocks_per_seq;
      if (options.side_stream != nullptr && options.fork_event != nullptr && options.join_event != nullptr) {
        // The prefill kernel (no workspace) on the side stream, the decode kernel here.
        CUDA_RETURN_IF_ERROR(cudaEventRecord(options.fork_event, stream));
        CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(options.side_stream, options.fork_event, 0));
        RETURN_IF_ERROR(LaunchTyped<T>(prefill, nullptr, 0, options, options.side_stream));
        CUDA_RETURN_IF_ERROR(cudaEventRecord(options.join_event, options.side_stream));
        RETURN_IF_ERROR(LaunchTyped<T>(decode, workspace, workspace_bytes, options, stream));
        CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, options.join_event, 0));
        return absl::OkStatus();
      }
      RETURN_IF_ERROR(LaunchTyped<T>(decode, workspace, workspace_bytes, options, stream));
      return LaunchTyped<T>(prefill, workspace, workspace_bytes, options, stream);
    }
    if (p.max_query_len > 1 && !options.force_simt && mma_dim) {
      // Heads fastest, query blocks from the last (causal: the most keys) to the first: blocks
      // start longest first, so the short ones fill in behind them instead of a long one
      // starting last and running alone (the hardware dispatches in linear block order).
      constexpr int kRows = attention::kMmaBlockRows;
      if (p.max_query_len > int64_t{kRows} * 65535)
        return absl::InvalidArgumentError("Attention: prompt chunk too long for one prefill call");
      const dim3 grid(p.num_heads, (p.max_query_len + kRows - 1) / kRows, p.num_seqs);
      auto launch = [&](auto kernel, size_t smem) -> absl::Status {
        CUDA_RETURN_IF_ERROR(AllowDynamicSmem(kernel, smem));
        kernel<<<grid, attention::kMmaThreads, smem, stream>>>(p);
        CUDA_RETURN_IF_LAUNCH_ERROR();
        return absl::OkStatus();
      };
      const bool pow2 = (p.block_size & (p.block_size - 1)) == 0;
      auto launch_dim = [&](auto fp8) -> absl::Status {
        constexpr bool kFp8 = decltype(fp8)::value;
        if (p.head_dim == 64) {
          return pow2 ? launch(AttentionPrefillMmaKernel<T, 64, true, kFp8>, attention::PrefillSmemBytes<T, 64, kFp8>())
                      : launch(AttentionPrefillMmaKernel<T, 64, false, kFp8>, attention::PrefillSmemBytes<T, 64, kFp8>());
        }
        return pow2 ? launch(AttentionPrefillMmaKernel<T, 128, true, kFp8>, attention::PrefillSmemBytes<T, 128, kFp8>())
                    : launch(AttentionPrefillMmaKernel<T, 128, false, kFp8>, attention::PrefillSmemBytes<T, 128, kFp8>());
      };
      return p.fp8_cache ? launch_dim(std::true_type{}) : launch_dim(std::false_type{});
    }
    // One query token per sequence (token t is sequence t), aligned rows: the decode kernel.
    if (p.max_query_len == 1 && p.num_seqs == p.num_tokens && !options.force_simt && mma_dim &&
        Aligned16(p.k_cache) && Aligned16(p.v_cache) && Aligned16(p.q) && Aligned16(p.out)) {
      switch (g) {
        case 1:
          return LaunchDecodeDim<T, 1>(p, options, head_tiles, workspace, workspace_bytes, stream);
        case 2:
          return LaunchDecodeDim<T, 2>(p, options, head_tiles, workspace, workspace_bytes, stream);
        case 4:
          return LaunchDecodeDim<T, 4>(p, options, head_tiles, workspace, workspace_bytes, stream);
        default:
          return LaunchDecodeDim<T, 8>(p, options, head_tiles, workspace, workspace_bytes, stream);
      }
    }
  }
  const DecodeSplit split = ChooseSimtSplit(p, options, head_tiles, workspace, workspace_bytes);
  constexpr int kVec = Vec16<T>::kVec;
  const bool vec = p.head_dim % kVec == 0 && Aligned16(p.k_cache) && Aligned16(p.v_cache);
  switch (g) {
    case 1:
      return LaunchSimtVec<T, 1>(p, vec, split, workspace, options.pdl, stream);
    case 2:
      return LaunchSimtVec<T, 2>(p, vec, split, workspace, options.pdl, stream);
    case 4:
      return LaunchSimtVec<T, 4>(p, vec, split, workspace, options.pdl, stream);
    default:
      return LaunchSimtVec<T, 8>(p, vec, split, workspace, options.pdl, stream);
  }
}

}  // namespace

size_t AttentionWorkspaceBytes(int64_t num_tokens, int32_t num_heads, int32_t head_dim, int32_t max_splits) {
  return kArrivalBytes + PartialBytesPerSplit(num_tokens, num_heads, head_dim) * static_cast<size_t>(max_splits);
}

absl::Status LaunchPagedAttention(DType dtype, const PagedAttentionParams& p, void* workspace,
                                  size_t workspace_bytes, const AttentionOptions& options, Stream stream) {
  if (p.num_tokens < 0 || p.num_seqs < 0 || p.num_kv_heads <= 0 || p.num_heads <= 0 ||
      p.num_heads % p.num_kv_heads != 0 || p.head_dim <= 0 || p.head_dim > attention::kSimtMaxHeadDim ||
      p.block_size <= 0 || p.max_blocks_per_seq <= 0)
    return absl::InvalidArgumentError(absl::StrCat("Attention: unsupported shape (heads ", p.num_heads,
                                                   ", kv heads ", p.num_kv_heads, ", head_dim ", p.head_dim,
                                                   ", block_size ", p.block_size, "); head_dim <= 256"));
  if (p.num_tokens == 0 || p.num_seqs == 0) return absl::OkStatus();
  if (p.num_tokens > 0x7fffffff || p.num_seqs > 65535 || p.max_query_len <= 0)
    return absl::InvalidArgumentError("Attention: step too large or empty queries");
  if (p.fp8_cache && (dtype == DType::kF32 || !(p.k_scale > 0.0f) || !(p.v_scale > 0.0f)))
    return absl::InvalidArgumentError("Attention: an FP8 cache needs 16-bit queries and positive scales");
  return LLM_DISPATCH_FLOAT(dtype, "Attention", [&] {
    return LaunchTyped<scalar_t>(p, workspace, workspace_bytes, options, stream);
  });
}

}  // namespace llm::cuda
