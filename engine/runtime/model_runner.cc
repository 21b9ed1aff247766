#include "engine/runtime/model_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llm {

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const ModelConfig& config,
                                                                 const Checkpoint& checkpoint,
                                                                 std::unique_ptr<Backend> backend,
                                                                 Communicator* tp_comm,
                                                                 const ModelRunnerOptions& options) {
  std::unique_ptr<ModelRunner> r(new ModelRunner(config, options));
  r->backend_ = std::move(backend);
  ASSIGN_OR_RETURN(LocalDims dims, ComputeLocalDims(config, options.shard));
  ASSIGN_OR_RETURN(auto weights, LoadWeights(config, checkpoint, options.shard, *r->backend_));
  ASSIGN_OR_RETURN(r->decoder_, Decoder::Create(config, dims, std::move(weights), *r->backend_, tp_comm, options.limits));

  r->max_context_ = options.max_context > 0 ? options.max_context : config.max_position_embeddings;
  if (r->max_context_ <= 0) return absl::InvalidArgumentError("the model's context length is unknown");
  r->block_table_width_ = static_cast<int32_t>((r->max_context_ + options.block_size - 1) / options.block_size);

  KvCacheShape kv;
  kv.num_layers = dims.end_layer - dims.first_layer;
  kv.block_size = options.block_size;
  kv.num_kv_heads = dims.num_kv_heads;
  kv.head_dim = dims.head_dim;
  kv.dtype = r->backend_->activation_dtype();
  // Enough for every sequence at full length, plus one spare, is all that can ever be used.
  const int64_t useful = int64_t{options.limits.max_seqs} * r->block_table_width_ + 1;
  if (options.num_kv_blocks > 0) {
    kv.num_blocks = options.num_kv_blocks;
  } else {
    ASSIGN_OR_RETURN(size_t free_bytes, r->backend_->FreeMemory());
    kv.num_blocks = std::min<int64_t>(useful, static_cast<int64_t>(free_bytes * options.kv_cache_fraction) /
                                                  static_cast<int64_t>(kv.BytesPerBlock()));
  }
  if (kv.num_blocks < r->block_table_width_)
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache of ", kv.num_blocks, " blocks cannot hold one sequence of ", r->max_context_,
        " tokens (", r->block_table_width_, " blocks of ", kv.block_size, "); lower --max-context or give more memory"));
  ASSIGN_OR_RETURN(r->kv_cache_, KvCache::Create(*r->backend_, kv));
  RETURN_IF_ERROR(r->AllocateMetadata());
  return r;
}

absl::Status ModelRunner::AllocateMetadata() {
  const int64_t t = options_.limits.max_tokens, s = options_.limits.max_seqs;
  struct Want {
    Tensor* dst;
    int64_t n;
  };
  const Want wants[] = {{&token_ids_, t},   {&positions_, t},    {&slot_mapping_, t},           {&query_start_, s + 1},
                        {&context_lens_, s}, {&logit_rows_, s}, {&block_tables_, s * block_table_width_}};
  size_t total = 0;
  for (const Want& w : wants) total += (w.n * 4 + 255) / 256 * 256;
  ASSIGN_OR_RETURN(Buffer buffer, backend_->Allocate(total));
  Arena arena(std::move(buffer));
  for (const Want& w : wants) {
    ASSIGN_OR_RETURN(*w.dst, arena.Take(DType::kI32, {w.n}));
  }
  metadata_memory_ = std::move(arena).Release();
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ModelRunner::Forward(const StepPlan& plan) {
  const int32_t n = plan.num_tokens(), s = plan.num_seqs();
  const int32_t rows = static_cast<int32_t>(plan.logit_rows.size());
  if (n == 0 || n > options_.limits.max_tokens || s > options_.limits.max_seqs)
    return absl::InvalidArgumentError(absl::StrCat("step plan of ", n, " tokens and ", s, " sequences is outside the limits"));
  if (plan.block_table_width != block_table_width_ || plan.block_tables.size() != size_t(s) * block_table_width_ ||
      plan.query_start.size() != size_t(s) + 1)
    return absl::InvalidArgumentError("malformed step plan");
  if (plan.max_context_len > max_context_)
    return absl::InvalidArgumentError(absl::StrCat("sequence of ", plan.max_context_len,
                                                   " tokens exceeds the context length ", max_context_));
  meta_.num_tokens = n;
  meta_.num_seqs = s;
  meta_.max_query_len = plan.max_query_len;
  meta_.max_context_len = plan.max_context_len;
  meta_.num_logit_rows = rows;
  auto upload = [&](Tensor full, const std::vector<int32_t>& v) -> absl::StatusOr<Tensor> {
    Tensor t = full.Rows(0, static_cast<int64_t>(v.size()));
    if (!v.empty()) RETURN_IF_ERROR(backend_->CopyToDevice(t, v.data()));
    return t;
  };
  ASSIGN_OR_RETURN(meta_.token_ids, upload(token_ids_, plan.token_ids));
  ASSIGN_OR_RETURN(meta_.positions, upload(positions_, plan.positions));
  ASSIGN_OR_RETURN(meta_.slot_mapping, upload(slot_mapping_, plan.slot_mapping));
  ASSIGN_OR_RETURN(meta_.query_start, upload(query_start_, plan.query_start));
  ASSIGN_OR_RETURN(meta_.context_lens, upload(context_lens_, plan.context_lens));
  ASSIGN_OR_RETURN(meta_.logit_rows, upload(logit_rows_, plan.logit_rows));
  ASSIGN_OR_RETURN(Tensor tables, upload(block_tables_, plan.block_tables));
  meta_.block_tables = tables.Reshape({s, block_table_width_});
  return decoder_->Forward(meta_, kv_cache_->layers());
}

absl::Status ModelRunner::Execute(const StepPlan& plan, absl::Span<const SampleRow> rows,
                                  absl::Span<SampleResult> results) {
  ASSIGN_OR_RETURN(Tensor logits, Forward(plan));
  if (rows.size() != plan.logit_rows.size()) return absl::InvalidArgumentError("one sample row per logit row");
  if (rows.empty()) return backend_->Synchronize();
  RETURN_IF_ERROR(backend_->Sample(logits, rows, results));
  return backend_->Synchronize();
}

absl::Status ModelRunner::Sample(Tensor logits, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results) {
  if (rows.empty()) return backend_->Synchronize();
  RETURN_IF_ERROR(backend_->Sample(logits, rows, results));
  return backend_->Synchronize();
}

absl::Status ModelRunner::ComputeLogits(const StepPlan& plan, float* out) {
  ASSIGN_OR_RETURN(Tensor logits, Forward(plan));
  RETURN_IF_ERROR(backend_->CopyToHost(out, logits));
  return backend_->Synchronize();
}

}  // namespace llm
