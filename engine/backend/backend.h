// Backend: the small set of ops the decoder's forward pass is written against. The CPU backend
// (float32, the oracle) and the CUDA backend implement the same contract; the decoder, the
// scheduler and the KV cache manager never know which one runs.
//
// Conventions for every op:
//  - Tensors are contiguous, row-major, on the backend's device, in the backend's activation
//    dtype unless stated (ids/positions/slots are int32, logits float32).
//  - Outputs are caller-owned and pre-sized (nothing allocates inside an op, so the decode step
//    can be captured in a CUDA graph); ops check shapes/dtypes and return InvalidArgument.
//  - Ops are asynchronous on the backend's stream; Synchronize() waits.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/core/int4_layout.h"
#include "engine/core/sampling.h"
#include "engine/core/storage_format.h"
#include "engine/core/tensor.h"
#include "kernels/core/philox.h"

namespace llm {

// y = x · Wᵀ + b, W stored [out_features, in_features] as in Hugging Face checkpoints, in the
// storage format it declares (engine/core/storage_format.h): float weights in the activation
// dtype, FP8 E4M3 with float32 scales (W = element * scale, by `format`'s granularity), or int4
// codes with per-row group scales and zeros (W = (code - zero) * scale) in the repacked layout
// that storage_format.h describes.
struct LinearWeight {
  Tensor weight;  // [N, K] of format.element; int4: u8 [N, Kp / 2]
  Tensor bias;    // [N] in the activation dtype, or empty
  StorageFormat format = StorageFormat::Float(DType::kF32);
  Tensor scale;   // f32, ScaleGridFor(format, N, K).numel() elements; int4: [N, G] of format.scale_dtype;
                  // empty when unscaled
  // Int4 only (storage_format.h): zero points u8 [N, G] (empty: 8), the group of each 32-column
  // chunk i32 [Kp / 32], the input column of each storage column i32 [Kp] (empty: the same), K.
  Tensor zero;
  Tensor chunk_group;
  Tensor input_perm;
  int64_t int4_in_features = 0;
  // Int4: Int4GroupChunks of chunk_group (int4_layout.h), set where the map is made; 0: unknown.
  int64_t int4_group_chunks = 0;
  // How a W8A8 kernel quantizes this linear's input (scaled formats only). Backends that keep
  // activations in 16 bits may ignore it (W8A16); the CPU oracle emulates it when asked.
  ActivationQuant input_quant = ActivationQuant::kNone;
  int32_t input_group = 0;  // kDynamicPerGroup: columns per scale
  Tensor input_scale;       // kStaticPerTensor: f32 [1]
  int64_t out_features() const { return weight.dim(0); }
  int64_t in_features() const { return format.int4() ? int4_in_features : weight.dim(1); }
  // Int4: the storage columns Kp (K plus act-order / group padding) and the groups G.
  int64_t int4_storage_columns() const { return weight.dim(1) * 2; }
  int64_t int4_groups() const { return scale.rank() == 2 ? scale.dim(1) : 0; }
  ScaleGrid scale_grid() const { return ScaleGridFor(format, out_features(), in_features()); }
  // Int4: the tensors checked against the format and each other; a view of them (host memory).
  absl::Status ValidateInt4(const char* op) const {
    return ::llm::ValidateInt4(format, weight, scale, zero, chunk_group, input_perm, int4_in_features, op);
  }
  Int4View int4_view() const { return MakeInt4View(weight, scale, zero, chunk_group, input_perm, int4_in_features); }
};

// A linear's input already quantized to FP8 E4M3 as its weight declares (per token, or by the
// weight's static input scale: LinearWeight::input_quant), written by the op that produced the
// input (AddRmsNormFp8, SiluMulFp8) beside its 16-bit output, so that a W8A8 Linear does not
// read the activations again to quantize them (LinearFp8Input). Element [t, c] stands for
// e4m3(values[t, c]) * scale, with the scale scales[t] (per token) or *input_scale (static).
struct Fp8Input {
  Tensor values;  // f8e4m3 [T, K]
  Tensor scales;  // f32 [T]: per token (unused for a static scale)
};

// `q` holds [rows, cols] of input quantized for `consumer` (per token or static per tensor).
inline absl::Status ValidateFp8Input(const char* op, const Fp8Input& q, const LinearWeight& consumer, int64_t rows,
                                     int64_t cols) {
  const bool per_token = consumer.input_quant == ActivationQuant::kDynamicPerToken;
  if (consumer.format.element != DType::kF8E4M3 || !(per_token || consumer.input_quant == ActivationQuant::kStaticPerTensor))
    return absl::InvalidArgumentError(absl::StrCat(op, ": the consumer's weight takes no per-token or static FP8 input"));
  if (consumer.in_features() != cols || q.values.dtype() != DType::kF8E4M3 || q.values.numel() != rows * cols)
    return absl::InvalidArgumentError(absl::StrCat(op, ": FP8 input ", q.values.shape().ToString(), " for ", rows,
                                                   " rows of ", cols, " columns (the consumer takes ",
                                                   consumer.in_features(), ")"));
  if (per_token ? q.scales.dtype() != DType::kF32 || q.scales.numel() != rows : consumer.input_scale.numel() != 1)
    return absl::InvalidArgumentError(absl::StrCat(op, ": FP8 input scales do not match ", rows, " rows"));
  if (q.values.device() != consumer.weight.device() || (per_token && q.scales.device() != q.values.device()))
    return absl::InvalidArgumentError(absl::StrCat(op, ": FP8 input is not on the weight's device"));
  return absl::OkStatus();
}

// One layer's paged KV cache. Block b of the layer holds, for each KV head, `block_size`
// consecutive token slots of head_dim values. A token's slot is block_id * block_size + offset.
// The tensors' dtype is the cache's storage: the activation dtype, or kF8E4M3, where QkvRope
// stores value / scale and Attention reads element * scale (per-tensor scales of the layer, from
// the checkpoint or 1.0).
struct KvCacheLayer {
  Tensor k;  // [num_blocks, num_kv_heads, block_size, head_dim]
  Tensor v;  // same
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  int64_t num_blocks() const { return k.dim(0); }
  int64_t block_size() const { return k.dim(2); }
};

// Per-step batch layout shared by all layers. Tokens of all sequences are packed ("ragged"):
// sequence s owns token rows [query_start[s], query_start[s+1]); its new tokens sit at positions
// context_lens[s] - query_len .. context_lens[s] - 1, after everything already in its cache.
// A step may mix prefill chunks and single-token decodes.
struct StepMetadata {
  int32_t num_tokens = 0;
  int32_t num_seqs = 0;
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  int32_t num_logit_rows = 0;
  // Leading sequences with exactly one query token (token s is sequence s): decodes, which the
  // scheduler puts first so that attention can treat them apart from the step's prefills.
  int32_t num_decode_seqs = 0;
  Tensor token_ids;     // i32 [num_tokens]
  Tensor positions;     // i32 [num_tokens]
  Tensor slot_mapping;  // i32 [num_tokens]: where each token's K/V goes; < 0 skips the write
  Tensor query_start;   // i32 [num_seqs + 1]
  Tensor context_lens;  // i32 [num_seqs]: cached tokens after this step (prefix + new)
  Tensor block_tables;  // i32 [num_seqs, max_blocks_per_seq]
  Tensor logit_rows;    // i32 [num_logit_rows]: token rows whose logits are wanted
};

// Rotary embedding, precomputed on the host for every rope variant (default, linear, llama3,
// yarn): cos/sin are built from position * inv_freq[i], times attention_scaling. Rotation is the
// Hugging Face "rotate_half" layout: element i pairs with i + rotary_dim / 2.
struct RopeParams {
  Tensor inv_freq;  // f32 [rotary_dim / 2]
  int32_t rotary_dim = 0;
  float attention_scaling = 1.0f;
};

// Splits a fused QKV projection, optionally RMS-normalizes each q and k head (Qwen3), applies
// RoPE to q and k, writes k and v into the paged cache at slot_mapping and q into q_out.
struct QkvRopeArgs {
  Tensor qkv;    // [T, (num_heads + 2 * num_kv_heads) * head_dim]
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  Tensor q_norm;  // [head_dim] or empty
  Tensor k_norm;  // [head_dim] or empty
  float norm_eps = 1e-6f;
  RopeParams rope;
  Tensor positions;     // i32 [T]
  Tensor slot_mapping;  // i32 [T]
  KvCacheLayer cache;
  Tensor q_out;  // [T, num_heads * head_dim]
};

// Causal attention of the step's queries over each sequence's paged cache (which already holds
// this step's keys). GQA: query head h reads KV head h / (num_heads / num_kv_heads).
struct AttentionArgs {
  Tensor q;  // [T, num_heads * head_dim]
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;
  int32_t sliding_window = 0;  // 0: unlimited; else a query at position p sees keys > p - window
  KvCacheLayer cache;
  const StepMetadata* meta = nullptr;
  Tensor out;  // [T, num_heads * head_dim]
};

// One row of logits to sample from.
struct SampleRow {
  const SamplingParams* params = nullptr;
  uint64_t step = 0;  // tokens generated so far: the RNG counter
  absl::Span<const int32_t> prompt_tokens;
  absl::Span<const int32_t> output_tokens;  // the outputs the host knows
  // >= 0: the row's latest output token is not in output_tokens: it was sampled by the previous
  // step and is still only on the device, as this step's input token at this index (the step's
  // resolved token ids, SampleArgs::input_tokens). Penalties count it as an output token.
  int32_t pending_input_index = -1;
  absl::Span<const LogitBias> logit_bias;  // distinct tokens, in the vocabulary
};

// Sampling runs on the backend's stream like every other op, so that a step's tokens can feed
// the next step on the device before the host has seen them (overlapped scheduling). The host
// results of a sampling call land in one of kSampleSlots slots and are read with
// ReadSampleResults once the stream has passed the call (a StepFence recorded after it has been
// waited for, or Synchronize). A caller keeps at most kSampleSlots samplings unread.
inline constexpr int kSampleSlots = 4;

struct SampleArgs {
  Tensor logits;  // f32 [>= rows, vocab]
  absl::Span<const SampleRow> rows;
  Tensor input_tokens;    // i32 [T]: the step's resolved input ids (for SampleRow::pending_input_index)
  Tensor sampled_tokens;  // i32 [>= rows] on the device: each row's sampled token; empty: not written
  int slot = 0;           // [0, kSampleSlots)
};

// A point in the backend's stream. Record() marks the stream's current end; Wait() blocks the
// host until the stream has passed that point. Fences also time the stream: the milliseconds
// between two passed fences (on a host backend, whose ops finish before they return, the host
// times at which they were recorded).
class StepFence {
 public:
  virtual ~StepFence() = default;
  virtual absl::Status Record() = 0;
  virtual absl::Status Wait() = 0;
  virtual absl::StatusOr<double> MillisecondsSince(const StepFence& earlier) const = 0;
};

// A recorded sequence of backend ops (a CUDA graph) that replays with the same arguments and
// addresses; inputs change by writing new values into the same device buffers first.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual absl::Status Replay() = 0;
};

// A fence for backends whose ops finish before they return: passed once recorded; it times the
// host clock.
class HostStepFence final : public StepFence {
 public:
  absl::Status Record() override {
    at_ = absl::Now();
    return absl::OkStatus();
  }
  absl::Status Wait() override { return absl::OkStatus(); }
  absl::StatusOr<double> MillisecondsSince(const StepFence& earlier) const override {
    const auto* e = dynamic_cast<const HostStepFence*>(&earlier);
    if (e == nullptr) return absl::InvalidArgumentError("fences of different backends");
    return absl::ToDoubleMilliseconds(at_ - e->at_);
  }

 private:
  absl::Time at_ = absl::Now();
};

// Checks a sampling call's shapes and every row's parameters; shared by all backends.
inline absl::Status ValidateSampleRows(const Tensor& logits, absl::Span<const SampleRow> rows) {
  if (logits.rank() != 2 || logits.dim(0) < static_cast<int64_t>(rows.size()))
    return absl::InvalidArgumentError("Sample: shape mismatch");
  for (const SampleRow& row : rows) {
    const SamplingParams& p = *row.params;
    if (!(p.temperature >= 0 && p.top_p > 0 && p.top_p <= 1 && p.min_p >= 0 && p.min_p <= 1 && p.top_k >= 0 &&
          p.repetition_penalty > 0 && p.num_top_logprobs >= 0 && p.num_top_logprobs <= kMaxTopLogprobs))
      return absl::InvalidArgumentError("Sample: sampling parameters out of range");
    for (const LogitBias& b : row.logit_bias)
      if (b.token < 0 || b.token >= logits.dim(1) || !std::isfinite(b.bias))
        return absl::InvalidArgumentError("Sample: logit bias out of range");
  }
  return absl::OkStatus();
}
inline absl::Status ValidateSampleArgs(const Tensor& logits, absl::Span<const SampleRow> rows,
                                       absl::Span<SampleResult> results) {
  if (results.size() != rows.size()) return absl::InvalidArgumentError("Sample: shape mismatch");
  return ValidateSampleRows(logits, rows);
}

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual DType activation_dtype() const = 0;

  // --- memory: at start-up only ---
  virtual absl::StatusOr<Buffer> Allocate(size_t bytes) = 0;
  // Bytes the device can still give (for sizing the KV cache).
  virtual absl::StatusOr<size_t> FreeMemory() const = 0;
  // Host -> device (`dst` on the device) and device -> host; async on the stream, the host
  // side must stay valid until Synchronize().
  virtual absl::Status CopyToDevice(Tensor dst, const void* src) = 0;
  virtual absl::Status CopyToHost(void* dst, Tensor src) = 0;
  // Converts `count` host elements of a floating `src_dtype` into device tensor `dst` (its dtype;
  // a kF8E4M3 destination rounds to nearest even and saturates at +-448).
  virtual absl::Status UploadConverted(const void* src, DType src_dtype, Tensor dst) = 0;
  virtual absl::Status Synchronize() = 0;
  // The device stream ops run on (cudaStream_t for CUDA), for device communicators that must
  // enqueue on it; null for the CPU backend.
  virtual void* native_stream() const { return nullptr; }

  // --- ops ---
  // out[t] = table[ids[t] - vocab_offset], zeros where the id falls outside this shard's rows.
  virtual absl::Status Embedding(Tensor table, Tensor ids, int64_t vocab_offset, Tensor out) = 0;
  // out = x / rms(x) * weight, over rows of length weight.numel().
  virtual absl::Status RmsNorm(Tensor x, Tensor weight, float eps, Tensor out) = 0;
  // residual += delta (when delta is not empty); out = RmsNorm(residual).
  virtual absl::Status AddRmsNorm(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out) = 0;
  // x += y.
  virtual absl::Status Add(Tensor x, Tensor y) = 0;
  // x [M, K] in the activation dtype, W in a format SupportsLinearFormat accepts; `out` [M, N] in
  // the activation dtype or float32 (the LM head writes float32 logits straight from
  // activation-dtype inputs).
  virtual absl::Status Linear(Tensor x, const LinearWeight& w, Tensor out) = 0;
  // The KV cache may be stored in any dtype SupportsKvCacheDType accepts (see KvCacheLayer).
  virtual absl::Status QkvRope(const QkvRopeArgs& args) = 0;
  virtual absl::Status Attention(const AttentionArgs& args) = 0;
  // out[t, i] = silu(gate_up[t, i]) * gate_up[t, F + i], gate_up [T, 2F], out [T, F].
  virtual absl::Status SiluMul(Tensor gate_up, Tensor out) = 0;
  // SiluMul(Linear(x, w)): `w` [2F, K] (gate rows, then up rows), `gate_up` [T, 2F] scratch for
  // the product, `out` [T, F]. A backend may run it as one kernel (leaving `gate_up` unwritten)
  // where it gives the same values, each product rounded to the activation dtype before the SiLU.
  virtual absl::Status LinearSiluMul(Tensor x, const LinearWeight& w, Tensor gate_up, Tensor out) {
    RETURN_IF_ERROR(Linear(x, w, gate_up));
    return SiluMul(gate_up, out);
  }
  // out[i] = x[rows[i]]. x and out both in the activation dtype, or both float32 (logits).
  virtual absl::Status GatherRows(Tensor x, Tensor rows, Tensor out) = 0;
  // Enqueues sampling of one token per row of float32 logits (see SampleArgs and kSampleSlots).
  virtual absl::Status EnqueueSample(const SampleArgs& args) = 0;
  // The results of the sampling that last used `slot`, once the stream has passed it.
  virtual absl::Status ReadSampleResults(int slot, absl::Span<SampleResult> results) = 0;
  // ids[i] < 0 stands for the token the previous step sampled in its row -ids[i] - 1: replaced,
  // on the device, with sampled[-ids[i] - 1]. Ids >= 0 stay.
  virtual absl::Status ResolvePendingTokens(Tensor ids, Tensor sampled) = 0;

  // Samples one token per row and waits for the results (tests and tools; uses the last slot).
  absl::Status Sample(Tensor logits, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results) {
    RETURN_IF_ERROR(ValidateSampleArgs(logits, rows, results));
    SampleArgs args;
    args.logits = logits;
    args.rows = rows;
    args.slot = kSampleSlots - 1;
    RETURN_IF_ERROR(EnqueueSample(args));
    RETURN_IF_ERROR(Synchronize());
    return ReadSampleResults(args.slot, results);
  }

  // --- FP8 inputs quantized by the op that produces them (Fp8Input) ---
  // Whether Linear over `rows` rows of x and `w` runs W8A8 on x quantized as w declares, and
  // takes that input pre-quantized (LinearFp8Input): the decoder then asks the producing op for
  // it. Backends that do not fuse the quantization say no, and none of the three below is called.
  virtual bool TakesFp8Input(const LinearWeight& w, int64_t rows) const { return false; }
  // AddRmsNorm, also writing `out` quantized for `consumer` (called where TakesFp8Input said yes;
  // checked: the shapes and the consumer's per-token or static input quantization) into
  // `quantized` ([T, K] codes, [T] scales): exactly the values and scales Linear would compute
  // from `out`. `out` is for LinearFp8Input alone: a backend whose LinearFp8Input reads only the
  // quantized input may leave it unwritten (the CUDA backend does).
  virtual absl::Status AddRmsNormFp8(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out,
                                     const LinearWeight& consumer, Fp8Input quantized) {
    return absl::UnimplementedError("this backend does not fuse FP8 input quantization");
  }
  // SiluMul, also writing `out` quantized for `consumer`, as AddRmsNormFp8.
  virtual absl::Status SiluMulFp8(Tensor gate_up, Tensor out, const LinearWeight& consumer, Fp8Input quantized) {
    return absl::UnimplementedError("this backend does not fuse FP8 input quantization");
  }
  // Linear(x, w, out) where `quantized` holds x quantized as w declares (written by one of the
  // two above): the same result as Linear, without quantizing x again.
  virtual absl::Status LinearFp8Input(Tensor x, Fp8Input quantized, const LinearWeight& w, Tensor out) {
    return absl::UnimplementedError("this backend does not fuse FP8 input quantization");
  }

  // --- the decode linears' RMSNorm and residual add, fused into their kernels ---
  // Whether Linear over `rows` rows of `w` forms the RMSNorm of its input itself (RmsNormLinear)
  // / adds its output into the residual (LinearAddInto) where the backend can: a hint for the
  // decoder, which otherwise runs AddRmsNorm and Linear apart (fewer kernels than the fallbacks
  // of the two ops below). Both ops work whatever these say.
  virtual bool FusesRmsNormInto(const LinearWeight& w, int64_t rows) const { return false; }
  virtual bool AddsIntoResidual(const LinearWeight& w, int64_t rows) const { return false; }
  // out = Linear(RmsNorm(x, norm_weight, eps), w); with `act` not empty, act = SiluMul(out) as
  // LinearSiluMul (which may leave `out` unwritten). Every value and rounding of the ops run apart;
  // `normed` (x's shape) is scratch for a backend that runs them apart.
  virtual absl::Status RmsNormLinear(Tensor x, Tensor norm_weight, float eps, Tensor normed, const LinearWeight& w,
                                     Tensor out, Tensor act) {
    RETURN_IF_ERROR(RmsNorm(x, norm_weight, eps, normed));
    return act.empty() ? Linear(normed, w, out) : LinearSiluMul(normed, w, out, act);
  }
  // residual += Linear(x, w), the product rounded to the activation dtype before the add (the
  // values of Linear into `delta`, then AddRmsNorm's add); `delta` is scratch for a backend that
  // runs them apart.
  virtual absl::Status LinearAddInto(Tensor x, const LinearWeight& w, Tensor residual, Tensor delta) {
    RETURN_IF_ERROR(Linear(x, w, delta));
    return Add(residual, delta);
  }

  // The attention block's projection: rope.qkv = Linear(x, w) (x normalized first where
  // `norm_weight` is set, as RmsNormLinear, `normed` its scratch), then QkvRope(rope). A backend
  // whose FusesQkvRope says yes runs the linear's end as QkvRope (leaving rope.qkv unwritten),
  // with the same values.
  virtual bool FusesQkvRope(const LinearWeight& w, const QkvRopeArgs& rope, int64_t rows) const { return false; }
  virtual absl::Status LinearQkvRope(Tensor x, Tensor norm_weight, float eps, Tensor normed, const LinearWeight& w,
                                     const QkvRopeArgs& rope) {
    RETURN_IF_ERROR(norm_weight.empty() ? Linear(x, w, rope.qkv)
                                        : RmsNormLinear(x, norm_weight, eps, normed, w, rope.qkv, Tensor()));
    return QkvRope(rope);
  }

  // The same where x comes quantized for w (rope.qkv = LinearFp8Input(x, quantized, w), then
  // QkvRope(rope)). A backend whose FusesFp8InputQkvRope says yes may apply the GEMM's scales in
  // QkvRope's kernel (rope.qkv left unwritten), with the same values.
  virtual bool FusesFp8InputQkvRope(const LinearWeight& w, const QkvRopeArgs& rope, int64_t rows) const {
    return false;
  }
  virtual absl::Status LinearFp8InputQkvRope(Tensor x, Fp8Input quantized, const LinearWeight& w,
                                             const QkvRopeArgs& rope) {
    RETURN_IF_ERROR(LinearFp8Input(x, quantized, w, rope.qkv));
    return QkvRope(rope);
  }

  // residual += Linear(x, w), then out = RmsNorm(residual, norm_weight, eps): Linear into `delta`,
  // then AddRmsNorm, or AddRmsNormFp8 for `consumer` where `out_quantized` is set. A backend whose
  // FusesLinearAddRmsNorm says yes may apply the GEMM's scales in the norm's kernel (`delta` then
  // left unwritten), with the same values.
  virtual bool FusesLinearAddRmsNorm(const LinearWeight& w, int64_t rows) const { return false; }
  virtual absl::Status LinearAddRmsNorm(Tensor x, const LinearWeight& w, Tensor residual, Tensor delta,
                                        Tensor norm_weight, float eps, Tensor out,
                                        const LinearWeight& consumer, const Fp8Input* out_quantized) {
    RETURN_IF_ERROR(Linear(x, w, delta));
    return out_quantized != nullptr
               ? AddRmsNormFp8(residual, delta, norm_weight, eps, out, consumer, *out_quantized)
               : AddRmsNorm(residual, delta, norm_weight, eps, out);
  }

  // --- overlapped steps ---
  // A fence on this backend's stream (see StepFence). The default suits a host backend.
  virtual absl::StatusOr<std::unique_ptr<StepFence>> CreateFence() {
    return std::unique_ptr<StepFence>(new HostStepFence());
  }
  // Host memory that asynchronous copies may read or write (CopyToDevice/CopyToHost) while the
  // host goes on (pinned on CUDA; plain host memory on a host backend). Start-up only.
  virtual absl::StatusOr<Buffer> AllocateStaging(size_t bytes) { return AllocateHost(bytes); }

  // --- storage formats: what the loader may hand this backend ---
  // Weight formats Linear takes. The loader keeps a checkpoint's FP8 weights as stored when the
  // backend takes them, and dequantizes them into the activation dtype otherwise.
  virtual bool SupportsLinearFormat(const StorageFormat& format) const {
    return format == StorageFormat::Float(activation_dtype());
  }
  // KV cache element types QkvRope and Attention take.
  virtual bool SupportsKvCacheDType(DType dtype) const { return dtype == activation_dtype(); }

  // --- optional capabilities; the defaults suit a host backend ---
  // dst[i] = low + (high - low) * UniformFloat(seed, i) (kernels/core/philox.h): random weights for
  // benchmarks (--dummy-weights). The default draws on the host and uploads; device backends
  // generate in place.
  // A kU8 destination (int4 codes) gets each draw truncated to an integer (low = 0, high = 256:
  // uniform bytes).
  virtual absl::Status FillUniform(Tensor dst, uint64_t seed, float low, float high) {
    std::vector<float> host(static_cast<size_t>(dst.numel()));
    for (size_t i = 0; i < host.size(); ++i) host[i] = low + (high - low) * UniformFloat(seed, i);
    if (dst.dtype() == DType::kU8) {
      std::vector<uint8_t> bytes(host.size());
      for (size_t i = 0; i < host.size(); ++i) bytes[i] = static_cast<uint8_t>(std::clamp(host[i], 0.0f, 255.0f));
      RETURN_IF_ERROR(CopyToDevice(dst, bytes.data()));
      return Synchronize();
    }
    RETURN_IF_ERROR(UploadConverted(host.data(), DType::kF32, dst));
    return Synchronize();
  }
  // Sizes the sampler's working memory for up to `max_rows` rows of `vocab` logits at start-up,
  // so that Sample allocates nothing while serving.
  virtual absl::Status PrepareSampler(int32_t max_rows, int64_t vocab) { return absl::OkStatus(); }
  // Graph capture: the ops issued between BeginCapture and EndCapture are recorded, not run, and
  // EndCapture returns them as a StepGraph. Backends without graphs say Unimplemented.
  virtual bool SupportsGraphs() const { return false; }
  // Brackets an eager step run just before a graph capture of the same shapes (ModelRunner): a
  // backend may time its kernel choices there, once per shape (it may synchronize).
  virtual void SetTuningPass(bool on) {}
  virtual absl::Status BeginCapture() { return absl::UnimplementedError("this backend has no graph capture"); }
  virtual absl::StatusOr<std::unique_ptr<StepGraph>> EndCapture() {
    return absl::UnimplementedError("this backend has no graph capture");
  }
};

}  // namespace llm
