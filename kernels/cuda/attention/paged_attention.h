// Causal attention of a ragged step's queries over the paged KV cache.
//
// Layouts (all row-major):
//   q, out        [num_tokens, num_heads, head_dim]
//   k/v cache     [num_cache_blocks, num_kv_heads, block_size, head_dim]
//   query_start   [num_seqs + 1]   sequence s owns token rows [query_start[s], query_start[s+1])
//   context_lens  [num_seqs]       cached tokens after this step; the step's queries sit at
//                                  positions context_len - query_len ... context_len - 1
//   block_tables  [num_seqs, max_blocks_per_seq]
//
// Kernels (chosen per call on the host; a step that mixes decodes and prefills runs both, the
// decode kernel over its leading single-token sequences, see num_decode_seqs):
//   decode  (one query token per sequence; bf16/fp16, head_dim 64 or 128): tensor-core kernel
//           (attention_decode_mma.cuh; the CUDA-core warp-per-32-keys kernel of
//           attention_decode.cuh on request); a block owns one token, one KV head and the query
//           heads of its GQA group (each K/V row is read once per group) and, for long
//           contexts, a slice of them ("flash-decoding" split-K; the last slice to finish
//           merges them).
//   decode, other shapes: the same split-K over the SIMT kernel (64-key tiles).
//   prefill (bf16/fp16, head_dim 64 or 128): FlashAttention-2 style tensor-core kernel
//           (mma.sync m16n8k16), 64 queries x 64 keys per tile, online softmax, no score
//           matrix in memory.
//   other   the SIMT kernel without splitting (any dtype, head_dim <= 256).
// Every kernel also reads an FP8 E4M3 cache (PagedAttentionParams::fp8_cache).
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

struct PagedAttentionParams {
  const void* q = nullptr;
  void* out = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* query_start = nullptr;
  const int32_t* context_lens = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t num_tokens = 0;
  int32_t num_seqs = 0;
  int32_t max_query_len = 0;    // host-side upper bound of query lengths
  int32_t max_context_len = 0;  // host-side upper bound of context lengths (sizes the split)
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  int32_t max_blocks_per_seq = 0;
  float scale = 1.0f;
  int32_t sliding_window = 0;  // 0: unlimited; else keys > position - window
  // Leading sequences with one query token each, token s being sequence s (the scheduler puts
  // decodes first). In a step that also prefills, they take the decode kernel and only the rest
  // the prefill kernel, which would otherwise spend a 64-row tile (and a K/V pass per query head)
  // on each of them.
  int32_t num_decode_seqs = 0;
  // FP8 E4M3 caches (16-bit q/out only): element e of a K (V) row is e * k_scale (v_scale). The
  // kernels read E4M3 rows and widen them exactly to the 16-bit type; k_scale is folded into the
  // query's scale and v_scale into the output's normalization (both per tensor).
  bool fp8_cache = false;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// The decode kernel for one-token sequences over 16-bit or FP8 caches with head_dim 64 or 128.
enum class DecodeKernel {
  kAuto,  // the tensor-core kernel
  kWarp,  // the CUDA-core kernel, a warp per 32 keys (attention_decode.cuh; tests and benches)
  kMma,   // the tensor-core kernel (attention_decode_mma.cuh)
};

struct AttentionOptions {
  int num_sms = 132;       // multiprocessors of the device (sizes the decode split)
  int force_splits = 0;    // > 0: use exactly this many context slices in decode (tests)
  bool force_simt = false; // never use the tensor-core prefill kernel nor the decode kernels above (tests)
  DecodeKernel decode_kernel = DecodeKernel::kAuto;
  bool pdl = false;        // decode kernels with programmatic dependent launch (launch overlaps the predecessor)
  // Tensor-core decode kernel: at most this many blocks an SM (2, or 3-4 where registers and shared
  // memory let them: an FP8 cache; 0: those for grids of at least two waves of three, else two).
  // Benches.
  int decode_blocks_per_sm = 0;
  // Tensor-core decode kernel over an FP8 cache: O kept transposed (Oᵀ += Vᵀ Pᵀ: half the
  // accumulator registers and O MMAs, four blocks an SM; attention_decode_mma.cuh).
  bool decode_fp8_transposed_o = true;
  // A mixed step's prefill attention runs on side_stream beside its decode attention, forked from
  // and joined back into the call's stream through the two events (all three owned by the caller;
  // null: one after the other). The prefill part of a serving step is often one short prompt: a
  // few dozen blocks that would otherwise run alone after the decode kernel (~20 us a layer).
  Stream side_stream = nullptr;
  Event fork_event = nullptr;
  Event join_event = nullptr;
};

// Bytes of split-K workspace that lets decode use up to `max_splits` slices for this shape.
size_t AttentionWorkspaceBytes(int64_t num_tokens, int32_t num_heads, int32_t head_dim, int32_t max_splits);

// `workspace` (device, caller-owned) bounds the decode split: slices that would not fit are not
// used. It may be null (no splitting). Zero-fill it once before its first use (the decode kernel
// keeps counters at its start, and every call leaves them zero again); calls sharing it must be
// ordered (one stream).
absl::Status LaunchPagedAttention(DType dtype, const PagedAttentionParams& p, void* workspace, size_t workspace_bytes,
                                  const AttentionOptions& options, Stream stream);

}  // namespace llm::cuda
