// Decoder: the Llama-family forward pass, written once against Backend ops. Architecture
// differences (biases, Qwen3's q/k norms, tied embeddings, rope variants, sliding window) are
// fields of ModelConfig, not code paths per model. Tensor parallelism adds two all-reduces per
// layer (after o_proj and down_proj) and one after the vocab-parallel embedding; pipeline
// parallelism runs only this stage's layer range.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/model/config.h"
#include "engine/model/rope.h"
#include "engine/model/weights.h"
#include "parallel/communicator.h"

namespace llm {

struct DecoderLimits {
  int32_t max_tokens = 2048;  // tokens per step (the prefill chunk budget)
  int32_t max_seqs = 256;     // sequences per step
  // Rows of logits per step; 0: max_seqs (one per sampled sequence). Teacher-forced scoring of
  // every prompt position (tests, perplexity) asks for more.
  int32_t max_logit_rows = 0;
  int32_t logit_rows() const { return max_logit_rows > 0 ? max_logit_rows : max_seqs; }
};

class Decoder {
 public:
  // `tp_comm` may be null when tp_size == 1.
  static absl::StatusOr<std::unique_ptr<Decoder>> Create(const ModelConfig& config, const LocalDims& dims,
                                                         std::unique_ptr<ModelWeights> weights, Backend& backend,
                                                         Communicator* tp_comm, DecoderLimits limits);

  // Where a later pipeline stage receives the previous stage's hidden state [num_tokens, hidden]
  // before calling Forward.
  Tensor HiddenInput(int32_t num_tokens) const { return residual_.Rows(0, num_tokens); }

  // Runs this stage's layers over one step. On the first stage the input is meta.token_ids;
  // otherwise HiddenInput(). Returns, on the last stage, float32 logits
  // [meta.num_logit_rows, vocab_local] (this rank's vocabulary shard), else the hidden state
  // [num_tokens, hidden] to send on. The returned view lives until the next call.
  // With tensor parallelism the vocabulary shards are gathered: logits are
  // [num_logit_rows, tp * vocab_local], padded columns at -1e30.
  absl::StatusOr<Tensor> Forward(const StepMetadata& meta, absl::Span<const KvCacheLayer> cache);

  const LocalDims& dims() const { return dims_; }
  const ModelWeights& weights() const { return *weights_; }
  size_t activation_bytes() const { return activations_.bytes(); }

 private:
  Decoder(const ModelConfig& config, const LocalDims& dims, std::unique_ptr<ModelWeights> weights, Backend& backend,
          Communicator* tp_comm, DecoderLimits limits)
      : config_(config), dims_(dims), weights_(std::move(weights)), backend_(backend), tp_comm_(tp_comm),
        limits_(limits) {}
  absl::Status AllocateActivations();
  absl::Status AllReduce(Tensor t);
  // residual += (delta summed over the TP ranks); normed = RMSNorm(residual) * weight: one fused
  // communicator kernel where the TP communicator offers it, else AllReduce + AddRmsNorm. `normed`
  // is the input of `consumer`: where *quantized is set (Fp8InputFor), the backend's norm also
  // writes it quantized there; the communicator's does not, and resets it.
  absl::Status ReduceAddRmsNorm(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor normed,
                                const LinearWeight& consumer, std::optional<Fp8Input>* quantized);
  absl::Status AddRmsNormFor(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor normed,
                             const LinearWeight& consumer, const std::optional<Fp8Input>& quantized);
  // The FP8 input buffer for `w`'s n rows of input, where the backend takes that input quantized
  // by the op producing it (Backend::TakesFp8Input); else nullopt.
  std::optional<Fp8Input> Fp8InputFor(const LinearWeight& w, int32_t n) const;
  // Linear, or LinearFp8Input where x's quantized form was written.
  absl::Status LinearOf(Tensor x, const std::optional<Fp8Input>& quantized, const LinearWeight& w, Tensor out);
  // The norm before `consumer` where it runs as its own op: normed = RMSNorm(residual, with the
  // pending delta added (and summed over the TP ranks) first), as ReduceAddRmsNorm.
  absl::Status NormBefore(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor normed,
                          const LinearWeight& consumer, std::optional<Fp8Input>* quantized);
  // Whether `consumer` may form its input's norm itself (Backend::RmsNormLinear): nothing pending
  // and no FP8 input quantized by the norm.
  bool NormFusesInto(const LinearWeight& consumer, const std::optional<Fp8Input>& quantized, int32_t n) const;
  // The o / down projection: its output added into the residual by the linear itself where the
  // backend does that (one rank: nothing to sum first) and `next`, the linear after the next norm
  // (null: the stage's end), forms that norm itself; else written to `delta`, pending.
  absl::Status ResidualLinear(Tensor x, const std::optional<Fp8Input>& quantized, const LinearWeight& w,
                              Tensor residual, Tensor delta, int32_t n, const LinearWeight* next);
  absl::Status Layer(int64_t index, const StepMetadata& meta, const KvCacheLayer& cache, int32_t tokens);

  const ModelConfig config_;
  const LocalDims dims_;
  std::unique_ptr<ModelWeights> weights_;
  Backend& backend_;
  Communicator* tp_comm_;
  DecoderLimits limits_;
  Buffer rope_memory_;
  RopeParams rope_;

  // Activation buffers sized for limits_ at creation; nothing is allocated per step.
  Buffer activations_;
  Tensor residual_, delta_, normed_, qkv_, q_, attn_, gate_up_, act_;
  Tensor last_residual_, last_delta_, last_normed_, logits_;
  // FP8 models whose linears take their input pre-quantized (Fp8Input): one buffer of E4M3 codes
  // (max_tokens x the widest such input, flat) and per-token scales, reused by every linear.
  Tensor fp8_codes_, fp8_scales_;
  // During Forward: whether delta_ holds the last o / down projection's output, not yet added to
  // the residual (nor summed over the TP ranks); else the residual holds everything (the first
  // layer of a stage, or the linear added into it: ResidualLinear).
  bool delta_pending_ = false;
  // Tensor parallelism: all-gathered shards [tp * logit_rows, vocab_local], the row orders that
  // interleave them, and the full logits [logit_rows, tp * vocab_local]. The orders for every
  // row count up to max_seqs are uploaded once at creation (gather_orders_, see GatherOrder), so
  // a decode step has no host-to-device copy and can be captured in a CUDA graph; larger
  // (prefill) row counts upload theirs into gather_scratch_.
  Tensor gathered_logits_, gather_orders_, gather_scratch_, full_logits_;
  std::vector<int32_t> gather_order_host_;
  absl::StatusOr<Tensor> GatherOrder(int32_t rows);
  absl::StatusOr<Tensor> GatherVocabShards(Tensor local, int32_t rows);
};

}  // namespace llm
