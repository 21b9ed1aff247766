// ModelRunner: everything one rank needs to execute a StepPlan: the backend, this shard's
// weights and decoder, the stage's KV cache and fixed device buffers for the step metadata
// (fixed addresses, so a step can be replayed as a CUDA graph). It computes; it does not decide
// what to compute: that is the scheduler's job.
#pragma once

#include <array>
#include <deque>
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
  int32_t max_graph_batch = 1024;
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

  // Steps are enqueued, not waited for, so that the host plans and launches step N+1 while the
  // device runs step N. Forward stages `plan` in one of a few pinned host slots, uploads it in one
  // copy, replaces the plan's pending-token placeholders (-(row + 1): the token the previous step
  // sampled in that row, StepPlan) on the device, and enqueues this stage's layers (see
  // Decoder::Forward): it returns the logits on the last stage, the hidden state to send on
  // otherwise. A later stage first receives into HiddenInput(). Up to kStepSlots steps may be
  // enqueued and not yet collected.
  static constexpr int kStepSlots = kSampleSlots - 1;  // Backend::Sample keeps the last sample slot
  absl::StatusOr<Tensor> Forward(const StepPlan& plan);
  Tensor HiddenInput(int32_t num_tokens) const { return decoder_->HiddenInput(num_tokens); }
  // Enqueues sampling one token per row of `logits` (from the last Forward, on the last stage);
  // each row's token stays on the device for the next step's placeholders. With `collect`, the
  // step's results are queued for CollectSamples (ranks that need no results pass false).
  absl::Status EnqueueSample(Tensor logits, absl::Span<const SampleRow> rows, bool collect);
  // Waits for the oldest step queued by EnqueueSample and returns its results; `timing` (may be
  // null) gets its device time and the idle gap before it.
  struct StepTiming {
    double device_ms = 0;  // the stream's time from the step's upload to its last sample copy
    double idle_ms = 0;    // the stream's idle time between the previous step's end and this one's
  };
  absl::Status CollectSamples(absl::Span<SampleResult> results, StepTiming* timing = nullptr);
  int uncollected() const { return static_cast<int>(uncollected_.size()); }
  // EnqueueSample and CollectSamples at once (tools and tests).
  absl::Status Sample(Tensor logits, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results);
  const LocalDims& dims() const { return decoder_->dims(); }

  // Runs the whole model (single stage) over `plan`, samples one token per logit row and waits.
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
  // The graph bucket of a decode step (0: the step runs eagerly).
  int32_t GraphBucket(const StepPlan& plan) const;
  // Fills the slot's host image of the metadata buffers for `plan` padded to `rows` sequences (a
  // graph bucket; `rows` = the plan's own size for an eager step) and uploads it in one copy.
  absl::Status StageMetadata(const StepPlan& plan, int32_t padded_seqs, bool graph);
  absl::StatusOr<Tensor> ForwardGraph(const StepPlan& plan, int32_t bucket);
  absl::Status ResolvePending(const StepPlan& plan, int32_t num_tokens);

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

  // Each step slot: a pinned host image of the metadata buffers (uploaded in one copy) and fences
  // at the step's start and end; reused once its end fence has passed. Steps queued for
  // CollectSamples: their slot and rows.
  struct StepSlot {
    Buffer host_metadata;
    std::unique_ptr<StepFence> begin, end;
    uint64_t step = 0;  // the step that last used the slot (0: none)
  };
  std::array<StepSlot, kStepSlots> slots_;
  int slot_ = -1;  // the slot of the last Forward
  std::deque<std::pair<int, int32_t>> uncollected_;
  uint64_t steps_ = 0;  // Forward calls so far
  // The last collected step and its slot, for the idle gap before the next one.
  uint64_t last_collected_step_ = 0;
  int last_collected_slot_ = -1;
  // Each row's token of the last sampling (the next step's placeholders read it), and how many.
  Buffer sampled_memory_;
  Tensor sampled_tokens_;
  int32_t last_sampled_rows_ = 0;

  // Decode graphs: bucket sizes, and per captured bucket the graph and the logits it writes.
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
};

}  // namespace llm
