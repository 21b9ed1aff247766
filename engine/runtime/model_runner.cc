#include "engine/runtime/model_runner.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace llm {

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Create(const ModelConfig& config,
                                                                 const Checkpoint& checkpoint,
                                                                 std::unique_ptr<Backend> backend,
                                                                 Communicator* tp_comm,
                                                                 const ModelRunnerOptions& options) {
  if (backend == nullptr) return absl::InvalidArgumentError("ModelRunner: no backend");
  ASSIGN_OR_RETURN(auto weights, LoadWeights(config, checkpoint, options.shard, *backend, options.load));
  return CreateFromWeights(config, std::move(weights), std::move(backend), tp_comm, options);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::CreateFromWeights(const ModelConfig& config,
                                                                            std::unique_ptr<ModelWeights> weights,
                                                                            std::unique_ptr<Backend> backend,
                                                                            Communicator* tp_comm,
                                                                            const ModelRunnerOptions& options) {
  if (backend == nullptr || weights == nullptr) return absl::InvalidArgumentError("ModelRunner: no backend or weights");
  if (options.block_size < 1)
    return absl::InvalidArgumentError(absl::StrCat("KV block size must be at least 1, got ", options.block_size));
  if (!(options.kv_cache_fraction > 0.0 && options.kv_cache_fraction <= 1.0))
    return absl::InvalidArgumentError(absl::StrCat("KV cache fraction must be in (0, 1], got ", options.kv_cache_fraction));
  if (options.num_kv_blocks < 0)
    return absl::InvalidArgumentError(absl::StrCat("KV cache blocks must be >= 0, got ", options.num_kv_blocks));
  std::unique_ptr<ModelRunner> r(new ModelRunner(config, options));
  r->backend_ = std::move(backend);
  r->tp_comm_ = tp_comm;
  ASSIGN_OR_RETURN(LocalDims dims, ComputeLocalDims(config, options.shard));
  ASSIGN_OR_RETURN(r->decoder_, Decoder::Create(config, dims, std::move(weights), *r->backend_, tp_comm, options.limits));
  // The sampler's working memory is sized now, before the KV cache takes what is left.
  if (dims.is_last_stage)
    RETURN_IF_ERROR(r->backend_->PrepareSampler(options.limits.logit_rows(), dims.vocab_local * options.shard.tp_size));

  r->max_context_ = options.max_context > 0 ? options.max_context : config.max_position_embeddings;
  if (r->max_context_ <= 0) return absl::InvalidArgumentError("the model's context length is unknown");
  r->block_table_width_ = static_cast<int32_t>((r->max_context_ + options.block_size - 1) / options.block_size);

  // Every fixed buffer before the KV cache, which takes its fraction of what is left.
  RETURN_IF_ERROR(r->AllocateMetadata());
  KvCacheShape kv;
  kv.num_layers = dims.end_layer - dims.first_layer;
  kv.block_size = options.block_size;
  kv.num_kv_heads = dims.num_kv_heads;
  kv.head_dim = dims.head_dim;
  const ModelWeights& weights_held = r->decoder_->weights();
  ASSIGN_OR_RETURN(kv.dtype, ChooseKvCacheDType(options.kv_cache_dtype, weights_held.has_kv_scales(), *r->backend_));
  std::vector<KvCacheScales> kv_scales;  // the checkpoint's, or 1.0 (uncalibrated)
  for (const LayerWeights& l : weights_held.layers) kv_scales.push_back({l.k_scale, l.v_scale});
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
  ASSIGN_OR_RETURN(r->kv_cache_, KvCache::Create(*r->backend_, kv, kv_scales));
  // Decode graph buckets, up to the sequence limit.
  const int32_t graph_max = std::min({options.max_graph_batch, options.limits.max_seqs, options.limits.max_tokens});
  // Every rank of a TP group and every pipeline stage captures its own graph of the same step;
  // the TP collectives inside it must be device-side (NCCL, NVLink), stage transfers stay outside.
  const bool graphs = graph_max > 0 && r->backend_->SupportsGraphs() &&
                      (tp_comm == nullptr || tp_comm->size() == 1 || tp_comm->CapturableInGraph());
  if (graphs) {
    // Powers of two to 32, then steps of 32 to 256, of 64 to 512 and of 128 beyond: a step pads
    // to at most 12.5% more rows than it has past 256.
    for (int32_t b = 1; b < graph_max; b = b < 32 ? 2 * b : b < 256 ? b + 32 : b < 512 ? b + 64 : b + 128)
      r->graph_buckets_.push_back(b);
    r->graph_buckets_.push_back(graph_max);
  }
  return r;
}

absl::Status ModelRunner::AllocateMetadata() {
  const int64_t t = options_.limits.max_tokens, s = options_.limits.max_seqs;
  struct Want {
    Tensor* dst;
    int64_t n;
  };
  const Want wants[] = {{&token_ids_, t},   {&positions_, t},    {&slot_mapping_, t},           {&query_start_, s + 1},
                        {&context_lens_, s}, {&logit_rows_, options_.limits.logit_rows()}, {&block_tables_, s * block_table_width_}};
  size_t total = 0;
  for (const Want& w : wants) total += (w.n * 4 + 255) / 256 * 256;
  ASSIGN_OR_RETURN(Buffer buffer, backend_->Allocate(total));
  Arena arena(std::move(buffer));
  for (const Want& w : wants) {
    ASSIGN_OR_RETURN(*w.dst, arena.Take(DType::kI32, {w.n}));
  }
  metadata_memory_ = std::move(arena).Release();
  for (StepSlot& slot : slots_) {
    ASSIGN_OR_RETURN(slot.host_metadata, backend_->AllocateStaging(metadata_memory_.bytes()));
    ASSIGN_OR_RETURN(slot.begin, backend_->CreateFence());
    ASSIGN_OR_RETURN(slot.end, backend_->CreateFence());
  }
  // Outside the metadata buffers: uploads never overwrite the samples the next step reads.
  const int64_t rows = std::max(1, options_.limits.logit_rows());
  ASSIGN_OR_RETURN(sampled_memory_, backend_->Allocate(static_cast<size_t>(rows) * sizeof(int32_t)));
  sampled_tokens_ = sampled_memory_.View(DType::kI32, {rows});
  return absl::OkStatus();
}

int32_t ModelRunner::GraphBucket(const StepPlan& plan) const {
  if (graph_buckets_.empty() || !graphs_enabled_ || !graph_status_.ok()) return 0;
  const int32_t n = plan.num_tokens();
  if (plan.max_query_len != 1 || plan.num_seqs() != n || static_cast<int32_t>(plan.logit_rows.size()) != n ||
      n > graph_buckets_.back())
    return 0;
  for (int32_t i = 0; i < n; ++i)
    if (plan.logit_rows[i] != i) return 0;
  return *std::lower_bound(graph_buckets_.begin(), graph_buckets_.end(), n);
}

// The slot's host image has the device metadata buffers' layout; it is filled for `plan` padded
// to `padded_seqs` sequences and uploaded in one copy up to the end of the block tables used (the
// last buffer). Padding sequences (graph buckets) hold one token at position 0 of block 0 with no
// KV write (slot -1), so they read valid memory and change nothing; their logit rows are ignored.
absl::Status ModelRunner::StageMetadata(const StepPlan& plan, int32_t padded_seqs, bool graph) {
  const int32_t n = plan.num_tokens(), s = plan.num_seqs(), w = block_table_width_;
  const char* base = static_cast<const char*>(metadata_memory_.data());
  int32_t* image = static_cast<int32_t*>(slots_[slot_].host_metadata.data());
  auto host = [&](const Tensor& t) { return image + (static_cast<const char*>(t.data()) - base) / sizeof(int32_t); };
  int32_t* ids = host(token_ids_);
  int32_t* pos = host(positions_);
  int32_t* slots = host(slot_mapping_);
  int32_t* qs = host(query_start_);
  int32_t* ctx = host(context_lens_);
  int32_t* rows = host(logit_rows_);
  int32_t* tables = host(block_tables_);
  std::copy(plan.token_ids.begin(), plan.token_ids.end(), ids);
  std::copy(plan.positions.begin(), plan.positions.end(), pos);
  std::copy(plan.slot_mapping.begin(), plan.slot_mapping.end(), slots);
  std::copy(plan.query_start.begin(), plan.query_start.end(), qs);
  std::copy(plan.context_lens.begin(), plan.context_lens.end(), ctx);
  std::copy(plan.logit_rows.begin(), plan.logit_rows.end(), rows);
  std::copy(plan.block_tables.begin(), plan.block_tables.end(), tables);
  if (graph) {  // a decode step: token i is sequence i's, and every row's logits are wanted
    for (int32_t i = n; i < padded_seqs; ++i) {
      ids[i] = 0;
      pos[i] = 0;
      slots[i] = -1;
      ctx[i] = 1;
      rows[i] = i;
      qs[i + 1] = i + 1;
    }
    std::fill(tables + static_cast<size_t>(s) * w, tables + static_cast<size_t>(padded_seqs) * w, 0);
  }
  // block_tables_ is the last buffer of the metadata arena: one copy covers everything used.
  const size_t used = reinterpret_cast<const char*>(tables + static_cast<size_t>(padded_seqs) * w) -
                      reinterpret_cast<const char*>(image);
  return backend_->CopyToDevice(
      Tensor(metadata_memory_.data(), DType::kI32, {static_cast<int64_t>(used / sizeof(int32_t))}, backend_->device()),
      image);
}

absl::Status ModelRunner::ResolvePending(const StepPlan& plan, int32_t num_tokens) {
  bool pending = false;
  for (int32_t id : plan.token_ids) {
    if (id >= 0) continue;
    if (-static_cast<int64_t>(id) > last_sampled_rows_)
      return absl::InvalidArgumentError(absl::StrCat("step plan refers to row ", -static_cast<int64_t>(id) - 1,
                                                     " of the previous step, which sampled ", last_sampled_rows_));
    pending = true;
  }
  if (!pending) return absl::OkStatus();
  return backend_->ResolvePendingTokens(token_ids_.Rows(0, num_tokens), sampled_tokens_.Rows(0, last_sampled_rows_));
}

// A decode step padded to `bucket` sequences replays the bucket's graph (captured on first use,
// right after an eager run of the same step, which also yields this step's result).
absl::StatusOr<Tensor> ModelRunner::ForwardGraph(const StepPlan& plan, int32_t bucket) {
  const int32_t n = plan.num_tokens(), w = block_table_width_;
  RETURN_IF_ERROR(StageMetadata(plan, bucket, /*graph=*/true));
  RETURN_IF_ERROR(ResolvePending(plan, n));
  meta_.num_tokens = bucket;
  meta_.num_seqs = bucket;
  meta_.max_query_len = 1;
  meta_.max_context_len = static_cast<int32_t>(max_context_);  // a bound: the graph serves any context
  meta_.num_logit_rows = bucket;
  meta_.num_decode_seqs = bucket;
  meta_.token_ids = token_ids_.Rows(0, bucket);
  meta_.positions = positions_.Rows(0, bucket);
  meta_.slot_mapping = slot_mapping_.Rows(0, bucket);
  meta_.query_start = query_start_.Rows(0, bucket + 1);
  meta_.context_lens = context_lens_.Rows(0, bucket);
  meta_.logit_rows = logit_rows_.Rows(0, bucket);
  meta_.block_tables = block_tables_.Rows(0, static_cast<int64_t>(bucket) * w).Reshape({bucket, w});

  auto it = graphs_.find(bucket);
  if (it != graphs_.end()) {
    RETURN_IF_ERROR(it->second.graph->Replay());
    return it->second.output.Rows(0, n);
  }
  backend_->SetTuningPass(true);
  absl::StatusOr<Tensor> eager_or = decoder_->Forward(meta_, kv_cache_->layers());
  backend_->SetTuningPass(false);
  ASSIGN_OR_RETURN(Tensor eager, std::move(eager_or));
  RETURN_IF_ERROR(backend_->Synchronize());
  // Capture. A failure turns graphs off for good (graph_status() says why); this step's result
  // is the eager one either way.
  CapturedStep step;
  absl::Status st = backend_->BeginCapture();
  if (st.ok()) {
    absl::StatusOr<Tensor> out = decoder_->Forward(meta_, kv_cache_->layers());
    absl::StatusOr<std::unique_ptr<StepGraph>> graph = backend_->EndCapture();
    if (!out.ok()) st = out.status();
    else if (!graph.ok()) st = graph.status();
    else {
      step.graph = std::move(*graph);
      step.output = *out;
    }
  }
  if (!st.ok()) {
    graph_status_ = st;
    ++graph_misses_;
    graphs_.emplace(bucket, CapturedStep{});
    return eager.Rows(0, n);
  }
  graphs_.emplace(bucket, std::move(step));
  return eager.Rows(0, n);
}

absl::StatusOr<Tensor> ModelRunner::Forward(const StepPlan& plan) {
  const int32_t n = plan.num_tokens(), s = plan.num_seqs();
  const int32_t rows = static_cast<int32_t>(plan.logit_rows.size());
  if (n == 0 || n > options_.limits.max_tokens || s > options_.limits.max_seqs || rows > options_.limits.logit_rows())
    return absl::InvalidArgumentError(absl::StrCat("step plan of ", n, " tokens, ", s, " sequences and ", rows,
                                                   " logit rows is outside the limits (", options_.limits.max_tokens,
                                                   ", ", options_.limits.max_seqs, ", ", options_.limits.logit_rows(), ")"));
  if (plan.block_table_width != block_table_width_ || plan.block_tables.size() != size_t(s) * block_table_width_ ||
      plan.query_start.size() != size_t(s) + 1 || plan.positions.size() != size_t(n) ||
      plan.slot_mapping.size() != size_t(n) || plan.context_lens.size() != size_t(s))
    return absl::InvalidArgumentError("malformed step plan");
  if (plan.max_context_len > max_context_)
    return absl::InvalidArgumentError(absl::StrCat("sequence of ", plan.max_context_len,
                                                   " tokens exceeds the context length ", max_context_));
  // The next slot; its previous step has ended (its upload and sample copies are done).
  slot_ = (slot_ + 1) % kStepSlots;
  StepSlot& slot = slots_[slot_];
  if (slot.step != 0) RETURN_IF_ERROR(slot.end->Wait());
  slot.step = ++steps_;
  RETURN_IF_ERROR(slot.begin->Record());
  absl::StatusOr<Tensor> out;
  if (const int32_t bucket = GraphBucket(plan); bucket > 0) {
    out = ForwardGraph(plan, bucket);
  } else {
    meta_.num_tokens = n;
    meta_.num_seqs = s;
    meta_.max_query_len = plan.max_query_len;
    meta_.max_context_len = plan.max_context_len;
    meta_.num_logit_rows = rows;
    meta_.num_decode_seqs = 0;
    while (meta_.num_decode_seqs < s && plan.query_start[meta_.num_decode_seqs + 1] == meta_.num_decode_seqs + 1)
      ++meta_.num_decode_seqs;
    RETURN_IF_ERROR(StageMetadata(plan, s, /*graph=*/false));
    RETURN_IF_ERROR(ResolvePending(plan, n));
    meta_.token_ids = token_ids_.Rows(0, n);
    meta_.positions = positions_.Rows(0, n);
    meta_.slot_mapping = slot_mapping_.Rows(0, n);
    meta_.query_start = query_start_.Rows(0, s + 1);
    meta_.context_lens = context_lens_.Rows(0, s);
    meta_.logit_rows = logit_rows_.Rows(0, rows);
    meta_.block_tables = block_tables_.Rows(0, static_cast<int64_t>(s) * block_table_width_)
                             .Reshape({s, block_table_width_});
    out = decoder_->Forward(meta_, kv_cache_->layers());
  }
  // Ends the slot's use unless a sampling follows (which records it again after its copies).
  RETURN_IF_ERROR(slot.end->Record());
  return out;
}

absl::Status ModelRunner::EnqueueSample(Tensor logits, absl::Span<const SampleRow> rows, bool collect) {
  if (slot_ < 0) return absl::FailedPreconditionError("EnqueueSample before Forward");
  if (rows.size() > static_cast<size_t>(meta_.num_logit_rows))
    return absl::InvalidArgumentError("more sample rows than logit rows");
  if (!rows.empty()) {  // a step of prefill chunks alone samples nothing, but is still collected
    SampleArgs args;
    args.logits = logits;
    args.rows = rows;
    args.input_tokens = meta_.token_ids;
    args.sampled_tokens = sampled_tokens_;
    args.slot = slot_;
    RETURN_IF_ERROR(backend_->EnqueueSample(args));
    RETURN_IF_ERROR(slots_[slot_].end->Record());
  }
  last_sampled_rows_ = static_cast<int32_t>(rows.size());
  if (collect) uncollected_.emplace_back(slot_, static_cast<int32_t>(rows.size()));
  return absl::OkStatus();
}

absl::Status ModelRunner::CollectSamples(absl::Span<SampleResult> results, StepTiming* timing) {
  if (uncollected_.empty()) return absl::FailedPreconditionError("no sampled step to collect");
  const auto [slot_index, rows] = uncollected_.front();
  uncollected_.pop_front();
  if (static_cast<int32_t>(results.size()) != rows)
    return absl::InternalError("collect does not match the sampled step");
  StepSlot& slot = slots_[slot_index];
  RETURN_IF_ERROR(slot.end->Wait());
  if (rows > 0) RETURN_IF_ERROR(backend_->ReadSampleResults(slot_index, results));
  if (timing != nullptr) {
    *timing = StepTiming{};
    ASSIGN_OR_RETURN(timing->device_ms, slot.end->MillisecondsSince(*slot.begin));
    if (last_collected_slot_ >= 0 && slots_[last_collected_slot_].step == last_collected_step_ &&
        last_collected_step_ + 1 == slot.step) {
      ASSIGN_OR_RETURN(double gap, slot.begin->MillisecondsSince(*slots_[last_collected_slot_].end));
      timing->idle_ms = std::max(0.0, gap);
    }
  }
  last_collected_slot_ = slot_index;
  last_collected_step_ = slot.step;
  return absl::OkStatus();
}

absl::Status ModelRunner::Execute(const StepPlan& plan, absl::Span<const SampleRow> rows,
                                  absl::Span<SampleResult> results) {
  ASSIGN_OR_RETURN(Tensor logits, Forward(plan));
  if (rows.size() != plan.logit_rows.size()) return absl::InvalidArgumentError("one sample row per logit row");
  if (rows.empty()) return backend_->Synchronize();
  return Sample(logits, rows, results);
}

absl::Status ModelRunner::Sample(Tensor logits, absl::Span<const SampleRow> rows, absl::Span<SampleResult> results) {
  if (rows.empty()) return backend_->Synchronize();
  RETURN_IF_ERROR(EnqueueSample(logits, rows, /*collect=*/true));
  // Earlier queued steps first: results come back in order.
  std::vector<SampleResult> skipped;
  while (uncollected_.size() > 1) {
    skipped.resize(uncollected_.front().second);
    RETURN_IF_ERROR(CollectSamples(absl::MakeSpan(skipped)));
  }
  return CollectSamples(results);
}

absl::Status ModelRunner::ComputeLogits(const StepPlan& plan, float* out) {
  ASSIGN_OR_RETURN(Tensor logits, Forward(plan));
  RETURN_IF_ERROR(backend_->CopyToHost(out, logits));
  return backend_->Synchronize();
}

}  // namespace llm
