// ModelRunner: everything one rank needs to execute a StepPlan: the backend, this shard's
// weights and decoder, the stage's KV cache and fixed device buffers for the step metadata
// (fixed addresses, so a step can be replayed as a CUDA graph). It computes; it does not decide
// what to compute: that is the scheduler's job.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/checkpoint.h"
#include "engine/model/config.h"
#include "engine/model/decoder.h"
#include "engine/model/step_plan.h"
#include "engine/model/weights.h"

namespace llm {

struct ModelRunnerOptions {
  DecoderLimits limits;
  int32_t block_size = 16;
  int64_t max_context = 0;       // 0: the model's max_position_embeddings
  int64_t num_kv_blocks = 0;     // 0: from kv_cache_fraction, capped at what max_seqs x max_context needs
  // The KV cache's element type (--kv-cache-dtype); nullopt: auto (ChooseKvCacheDType).
  std::optional<DType> kv_cache_dtype;
  LoadOptions load;  // --quantization
  double kv_cache_fraction = 0.9;  // of the memory free after weights and activations
  ShardSpec shard;
  // Decode steps (one token per sequence, all logits wanted) of up to this many sequences replay
  // a CUDA graph captured per batch-size bucket, on backends that support graphs, when the TP
  // communicator (if any) can be captured too. 0 disables graphs.
  int32_t max_graph_batch = 256;
};

class ModelRunner {
 public:
  static absl::StatusOr<std::unique_ptr<ModelRunner>> Create(const ModelConfig& config, const Checkpoint& checkpoint,
                                                             std::unique_ptr<Backend> backend,
                                                             Communicator* tp_comm, const ModelRunnerOptions& options);
  // Same, with weights already in the backend's memory (e.g. CreateDummyWeights).
  static absl::StatusOr<std::unique_ptr<ModelRunner>> CreateFromWeights(const ModelConfig& config,
                                                                        std::unique_ptr<ModelWeights> weights,
                                                                        std::unique_ptr<Backend> backend,
                                                                        Communicator* tp_comm,
                                                                        const ModelRunnerOptions& options);

  // Runs this stage's layers over `plan` (see Decoder::Forward): logits on the last stage, the
  // hidden state to send on otherwise. A later stage first receives into HiddenInput().
  absl::StatusOr<Tensor> Forward(const StepPlan& plan);
  Tensor HiddenInput(int32_t num_tokens) const { return decoder_->HiddenInput(num_tokens); }
  // Samples one token per row of `logits` (from Forward on the last stage).
  absl::Status Sample(Tensor logits, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results);
  const LocalDims& dims() const { return decoder_->dims(); }

  // Runs the whole model (single stage) over `plan` and samples one token per logit row.
  absl::Status Execute(const StepPlan& plan, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results);
  // Runs the model and copies the float32 logits of each logit row to `logits` [rows, vocab].
  absl::Status ComputeLogits(const StepPlan& plan, float* logits);

  const ModelConfig& config() const { return config_; }
  const KvCacheShape& kv_shape() const { return kv_cache_->shape(); }
  int32_t block_table_width() const { return block_table_width_; }
  int64_t max_context() const { return max_context_; }
  const DecoderLimits& limits() const { return options_.limits; }
  Backend& backend() { return *backend_; }
  size_t weight_bytes() const { return decoder_->weights().bytes; }
  size_t kv_cache_bytes() const { return kv_cache_->bytes(); }
  size_t activation_bytes() const { return decoder_->activation_bytes() + metadata_memory_.bytes(); }
  absl::Span<const KvCacheLayer> kv_cache_layers() const { return kv_cache_->layers(); }
  // Decode graphs captured so far (one per batch-size bucket used), and why capture was given up,
  // if it was (decode then runs eagerly).
  int graphs_captured() const { return static_cast<int>(graphs_.size()) - graph_misses_; }
  const absl::Status& graph_status() const { return graph_status_; }
  // Drops the captured graphs (they are captured again on next use), e.g. after changing backend
  // options that kernels read at capture time.
  // Turns the graph path off/on (eager steps run op by op, e.g. to time each op).
  void EnableGraphs(bool on) { graphs_enabled_ = on; }
  void ClearGraphs() {
    graphs_.clear();
    graph_misses_ = 0;
    graph_status_ = absl::OkStatus();
  }

 private:
  ModelRunner(const ModelConfig& config, const ModelRunnerOptions& options) : config_(config), options_(options) {}
  absl::Status AllocateMetadata();
  // The graph path of Forward: nullopt-like (ok, empty tensor) when `plan` is not a decode step
  // that a graph can run.
  int32_t GraphBucket(const StepPlan& plan) const;
  absl::StatusOr<Tensor> ForwardGraph(const StepPlan& plan, int32_t bucket);

  ModelConfig config_;
  ModelRunnerOptions options_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<KvCache> kv_cache_;
  int64_t max_context_ = 0;
  int32_t block_table_width_ = 0;

  Buffer metadata_memory_;
  Tensor token_ids_, positions_, slot_mapping_, query_start_, context_lens_, block_tables_, logit_rows_;
  StepMetadata meta_;

  // Decode graphs: bucket sizes, and per captured bucket the graph and the logits it writes. The
  // graph path fills a host image of the metadata buffers and uploads it in one copy.
  Communicator* tp_comm_ = nullptr;
  std::vector<int32_t> graph_buckets_;
  struct CapturedStep {
    std::unique_ptr<StepGraph> graph;
    Tensor output;
  };
  std::map<int32_t, CapturedStep> graphs_;
  int graph_misses_ = 0;
  bool graphs_enabled_ = true;
  absl::Status graph_status_;
  std::vector<int32_t> host_metadata_;
};

}  // namespace llm
