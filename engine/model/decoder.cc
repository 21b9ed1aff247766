#include "engine/model/decoder.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace llm {

absl::StatusOr<std::unique_ptr<Decoder>> Decoder::Create(const ModelConfig& config, const LocalDims& dims,
                                                         std::unique_ptr<ModelWeights> weights, Backend& backend,
                                                         Communicator* tp_comm, DecoderLimits limits) {
  if (limits.max_tokens <= 0 || limits.max_seqs <= 0)
    return absl::InvalidArgumentError("decoder limits must be positive");
  std::unique_ptr<Decoder> d(new Decoder(config, dims, std::move(weights), backend, tp_comm, limits));
  ASSIGN_OR_RETURN(RopeTable table, ComputeRopeTable(config));
  ASSIGN_OR_RETURN(d->rope_memory_, backend.Allocate(table.inv_freq.size() * sizeof(float)));
  d->rope_.inv_freq = d->rope_memory_.View(DType::kF32, {static_cast<int64_t>(table.inv_freq.size())});
  d->rope_.rotary_dim = table.rotary_dim;
  d->rope_.attention_scaling = table.attention_scaling;
  RETURN_IF_ERROR(backend.CopyToDevice(d->rope_.inv_freq, table.inv_freq.data()));
  RETURN_IF_ERROR(backend.Synchronize());
  RETURN_IF_ERROR(d->AllocateActivations());
  return d;
}

absl::Status Decoder::AllocateActivations() {
  const DType dt = backend_.activation_dtype();
  const int64_t t = limits_.max_tokens, s = limits_.logit_rows(), h = dims_.hidden;
  const int64_t q_size = dims_.num_heads * dims_.head_dim;
  struct Want {
    Tensor* dst;
    DType dtype;
    Shape shape;
  };
  const Want wants[] = {
      {&residual_, dt, {t, h}},
      {&delta_, dt, {t, h}},
      {&normed_, dt, {t, h}},
      {&qkv_, dt, {t, dims_.qkv_size()}},
      {&q_, dt, {t, q_size}},
      {&attn_, dt, {t, q_size}},
      {&gate_up_, dt, {t, 2 * dims_.ffn}},
      {&act_, dt, {t, dims_.ffn}},
      {&last_residual_, dt, {s, h}},
      {&last_delta_, dt, {s, h}},
      {&last_normed_, dt, {s, h}},
      {&logits_, DType::kF32, {s, dims_.vocab_local}},
  };
  std::vector<Want> all(std::begin(wants), std::end(wants));
  // Linears whose input an op quantizes for them: the widest such input sizes the buffer.
  int64_t fp8_cols = 0;
  for (const LayerWeights& lw : weights_->layers)
    for (const LinearWeight* w : {&lw.qkv, &lw.gate_up, &lw.down})
      if (backend_.TakesFp8Input(*w, t)) fp8_cols = std::max(fp8_cols, w->in_features());
  if (fp8_cols > 0) {
    all.push_back({&fp8_codes_, DType::kF8E4M3, {t * fp8_cols}});
    all.push_back({&fp8_scales_, DType::kF32, {t}});
  }
  const int64_t tp = tp_comm_ ? tp_comm_->size() : 1;
  const int64_t table_rows = std::min<int64_t>(s, limits_.max_seqs);
  if (tp > 1 && dims_.is_last_stage) {
    all.push_back({&gathered_logits_, DType::kF32, {tp * s, dims_.vocab_local}});
    all.push_back({&gather_orders_, DType::kI32, {tp * table_rows * (table_rows + 1) / 2}});
    all.push_back({&gather_scratch_, DType::kI32, {tp * s}});
    all.push_back({&full_logits_, DType::kF32, {s, tp * dims_.vocab_local}});
  }
  size_t total = 0;
  for (const Want& w : all) total += (w.shape.numel() * DTypeSize(w.dtype) + 255) / 256 * 256;
  ASSIGN_OR_RETURN(Buffer buffer, backend_.Allocate(total));
  Arena arena(std::move(buffer));
  for (const Want& w : all) {
    ASSIGN_OR_RETURN(*w.dst, arena.Take(w.dtype, w.shape));
  }
  activations_ = std::move(arena).Release();
  if (tp > 1 && dims_.is_last_stage) {
    // Row order for `rows` logit rows at offset tp * rows * (rows - 1) / 2 (see GatherOrder).
    gather_order_host_.resize(gather_orders_.numel());
    for (int64_t rows = 1, at = 0; rows <= table_rows; at += tp * rows, ++rows)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t sh = 0; sh < tp; ++sh) gather_order_host_[at + r * tp + sh] = static_cast<int32_t>(sh * rows + r);
    RETURN_IF_ERROR(backend_.CopyToDevice(gather_orders_, gather_order_host_.data()));
    RETURN_IF_ERROR(backend_.Synchronize());
    gather_order_host_.assign(tp * s, 0);
  }
  return absl::OkStatus();
}

absl::Status Decoder::AllReduce(Tensor t) {
  if (tp_comm_ == nullptr || tp_comm_->size() == 1) return absl::OkStatus();
  return tp_comm_->AllReduceSum(t.data(), t.numel(), t.dtype());
}

std::optional<Fp8Input> Decoder::Fp8InputFor(const LinearWeight& w, int32_t n) const {
  const int64_t k = w.in_features();
  if (fp8_codes_.empty() || n * k > fp8_codes_.numel() || !backend_.TakesFp8Input(w, n)) return std::nullopt;
  return Fp8Input{fp8_codes_.Rows(0, n * k).Reshape({n, k}), fp8_scales_.Rows(0, n)};
}

absl::Status Decoder::AddRmsNormFor(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor normed,
                                    const LinearWeight& consumer, const std::optional<Fp8Input>& quantized) {
  if (quantized) return backend_.AddRmsNormFp8(residual, delta, weight, eps, normed, consumer, *quantized);
  return backend_.AddRmsNorm(residual, delta, weight, eps, normed);
}

absl::Status Decoder::LinearOf(Tensor x, const std::optional<Fp8Input>& quantized, const LinearWeight& w,
                               Tensor out) {
  if (quantized) return backend_.LinearFp8Input(x, *quantized, w, out);
  return backend_.Linear(x, w, out);
}

absl::Status Decoder::ReduceAddRmsNorm(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor normed,
                                       const LinearWeight& consumer, std::optional<Fp8Input>* quantized) {
  if (tp_comm_ == nullptr || tp_comm_->size() == 1)
    return AddRmsNormFor(residual, delta, weight, eps, normed, consumer, *quantized);
  const size_t rows = static_cast<size_t>(residual.shape()[0]), dim = static_cast<size_t>(residual.shape()[1]);
  if (tp_comm_->CanAllReduceAddRmsNorm(rows, dim, delta.dtype())) {
    quantized->reset();  // the communicator's kernel writes the 16-bit output only
    return tp_comm_->AllReduceAddRmsNorm(delta.data(), residual.data(), weight.data(), eps, normed.data(), rows, dim,
                                         delta.dtype());
  }
  RETURN_IF_ERROR(AllReduce(delta));
  return AddRmsNormFor(residual, delta, weight, eps, normed, consumer, *quantized);
}

absl::Status Decoder::NormBefore(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor normed,
                                 const LinearWeight& consumer, std::optional<Fp8Input>* quantized) {
  if (!delta_pending_) return AddRmsNormFor(residual, Tensor(), weight, eps, normed, consumer, *quantized);
  delta_pending_ = false;
  return ReduceAddRmsNorm(residual, delta, weight, eps, normed, consumer, quantized);
}

bool Decoder::NormFusesInto(const LinearWeight& consumer, const std::optional<Fp8Input>& quantized, int32_t n) const {
  return !delta_pending_ && !quantized && backend_.FusesRmsNormInto(consumer, n);
}

absl::Status Decoder::ResidualLinear(Tensor x, const std::optional<Fp8Input>& quantized, const LinearWeight& w,
                                     Tensor residual, Tensor delta, int32_t n, const LinearWeight* next) {
  const bool one_rank = tp_comm_ == nullptr || tp_comm_->size() == 1;
  // Only where the next norm then runs inside its linear too: otherwise that norm's kernel adds
  // the delta at no cost, and the add in the linear's end would be a dependent load more.
  const bool next_fuses = next == nullptr || (!Fp8InputFor(*next, n) && backend_.FusesRmsNormInto(*next, n));
  if (one_rank && !quantized && next_fuses && backend_.AddsIntoResidual(w, n)) {
    delta_pending_ = false;
    return backend_.LinearAddInto(x, w, residual, delta);
  }
  delta_pending_ = true;  // summed over the ranks and added by the next norm (or Forward)
  return LinearOf(x, quantized, w, delta);
}

absl::Status Decoder::Layer(int64_t index, const StepMetadata& meta, const KvCacheLayer& cache, int32_t n) {
  const LayerWeights& w = weights_->layers[index];
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor residual = residual_.Rows(0, n), delta = delta_.Rows(0, n), normed = normed_.Rows(0, n);
  // Attention block. Where `delta` holds the previous layer's MLP output (delta_pending_), not yet
  // summed over the TP ranks nor added to the residual, its all-reduce runs here, fused with the
  // add and the norm where the communicator can. Where the backend takes a W8A8 linear's input
  // pre-quantized, the op before it writes it so; where the linear forms its input's norm itself,
  // no norm op runs, and where its end is RoPE and the KV write, no QkvRope op.
  std::optional<Fp8Input> qkv_input = Fp8InputFor(w.qkv, n);
  Tensor qkv = qkv_.Rows(0, n), q = q_.Rows(0, n), attn = attn_.Rows(0, n);
  QkvRopeArgs rope_args;
  rope_args.qkv = qkv;
  rope_args.num_heads = static_cast<int32_t>(dims_.num_heads);
  rope_args.num_kv_heads = static_cast<int32_t>(dims_.num_kv_heads);
  rope_args.head_dim = static_cast<int32_t>(dims_.head_dim);
  rope_args.q_norm = w.q_norm;
  rope_args.k_norm = w.k_norm;
  rope_args.norm_eps = eps;
  rope_args.rope = rope_;
  rope_args.positions = meta.positions;
  rope_args.slot_mapping = meta.slot_mapping;
  rope_args.cache = cache;
  rope_args.q_out = q;
  const bool norm_fused = NormFusesInto(w.qkv, qkv_input, n);
  if (!norm_fused) RETURN_IF_ERROR(NormBefore(residual, delta, w.input_norm, eps, normed, w.qkv, &qkv_input));
  if (!qkv_input && backend_.FusesQkvRope(w.qkv, rope_args, n)) {  // the projection ends in RoPE
    RETURN_IF_ERROR(backend_.LinearQkvRope(norm_fused ? residual : normed, norm_fused ? w.input_norm : Tensor(), eps,
                                           normed, w.qkv, rope_args));
  } else if (qkv_input && backend_.FusesFp8InputQkvRope(w.qkv, rope_args, n)) {
    RETURN_IF_ERROR(backend_.LinearFp8InputQkvRope(normed, *qkv_input, w.qkv, rope_args));
  } else {
    if (norm_fused) {
      RETURN_IF_ERROR(backend_.RmsNormLinear(residual, w.input_norm, eps, normed, w.qkv, qkv, Tensor()));
    } else {
      RETURN_IF_ERROR(LinearOf(normed, qkv_input, w.qkv, qkv));
    }
    RETURN_IF_ERROR(backend_.QkvRope(rope_args));
  }
  AttentionArgs attn_args;
  attn_args.q = q;
  attn_args.num_heads = rope_args.num_heads;
  attn_args.num_kv_heads = rope_args.num_kv_heads;
  attn_args.head_dim = rope_args.head_dim;
  attn_args.scale = 1.0f / std::sqrt(static_cast<float>(dims_.head_dim));
  attn_args.sliding_window = static_cast<int32_t>(config_.sliding_window);
  attn_args.cache = cache;
  attn_args.meta = &meta;
  attn_args.out = attn;
  RETURN_IF_ERROR(backend_.Attention(attn_args));
  std::optional<Fp8Input> gate_up_input = Fp8InputFor(w.gate_up, n);
  const std::optional<Fp8Input> down_input = Fp8InputFor(w.down, n);
  // o_proj, its residual add and the MLP's norm as one op where the backend joins them (on one
  // rank, where the norm does not go into gate_up's own kernel).
  const bool one_rank = tp_comm_ == nullptr || tp_comm_->size() == 1;
  const bool norm_in_gate_up = !down_input && !gate_up_input && backend_.FusesRmsNormInto(w.gate_up, n);
  const bool post_norm_with_o = one_rank && !norm_in_gate_up && backend_.FusesLinearAddRmsNorm(w.o_proj, n);
  if (post_norm_with_o) {
    RETURN_IF_ERROR(backend_.LinearAddRmsNorm(attn, w.o_proj, residual, delta, w.post_attention_norm, eps,
                                              normed, w.gate_up, gate_up_input ? &*gate_up_input : nullptr));
    delta_pending_ = false;
  } else {
    RETURN_IF_ERROR(ResidualLinear(attn, std::nullopt, w.o_proj, residual, delta, n, &w.gate_up));
  }
  // MLP block.
  Tensor gate_up = gate_up_.Rows(0, n), act = act_.Rows(0, n);
  if (!post_norm_with_o && !down_input && NormFusesInto(w.gate_up, gate_up_input, n)) {
    RETURN_IF_ERROR(backend_.RmsNormLinear(residual, w.post_attention_norm, eps, normed, w.gate_up, gate_up, act));
  } else {
    if (!post_norm_with_o)
      RETURN_IF_ERROR(
          NormBefore(residual, delta, w.post_attention_norm, eps, normed, w.gate_up, &gate_up_input));
    if (!gate_up_input && !down_input) {  // the backend may fuse the two (decode's GEMVs do)
      RETURN_IF_ERROR(backend_.LinearSiluMul(normed, w.gate_up, gate_up, act));
    } else {
      RETURN_IF_ERROR(LinearOf(normed, gate_up_input, w.gate_up, gate_up));
      RETURN_IF_ERROR(down_input ? backend_.SiluMulFp8(gate_up, act, w.down, *down_input)
                                 : backend_.SiluMul(gate_up, act));
    }
  }
  // Where left pending: the next layer's norm (or Forward, after the last layer) sums it.
  const bool last = index + 1 == static_cast<int64_t>(weights_->layers.size());
  const LinearWeight* next = !last ? &weights_->layers[index + 1].qkv : dims_.is_last_stage ? &weights_->lm_head : nullptr;
  return ResidualLinear(act, down_input, w.down, residual, delta, n, next);
}

absl::StatusOr<Tensor> Decoder::Forward(const StepMetadata& meta, absl::Span<const KvCacheLayer> cache) {
  const int32_t n = meta.num_tokens;
  if (n <= 0 || n > limits_.max_tokens || meta.num_seqs > limits_.max_seqs || meta.num_logit_rows > limits_.logit_rows())
    return absl::InvalidArgumentError(absl::StrCat("step of ", n, " tokens / ", meta.num_seqs,
                                                   " sequences exceeds the decoder limits (", limits_.max_tokens,
                                                   " tokens, ", limits_.max_seqs, " sequences, ", limits_.logit_rows(),
                                                   " logit rows)"));
  if (static_cast<int64_t>(cache.size()) != dims_.end_layer - dims_.first_layer)
    return absl::InvalidArgumentError("KV cache layers do not match this stage's layers");
  Tensor residual = residual_.Rows(0, n);
  if (dims_.is_first_stage) {
    RETURN_IF_ERROR(backend_.Embedding(weights_->embedding, meta.token_ids, dims_.vocab_offset, residual));
    RETURN_IF_ERROR(AllReduce(residual));  // vocab-parallel: each rank holds some rows
  }
  delta_pending_ = false;  // a stage's input is its whole residual stream
  for (int64_t l = 0; l < static_cast<int64_t>(weights_->layers.size()); ++l)
    RETURN_IF_ERROR(Layer(l, meta, cache[l], n));
  const bool pending = delta_pending_;  // the last layer's MLP output, where not added yet
  if (pending) RETURN_IF_ERROR(AllReduce(delta_.Rows(0, n)));

  if (!dims_.is_last_stage) {
    if (pending) RETURN_IF_ERROR(backend_.Add(residual, delta_.Rows(0, n)));
    return residual;
  }
  // Last stage: only the rows that produce logits go through the final norm and the LM head.
  const int32_t rows = meta.num_logit_rows;
  Tensor last_residual = last_residual_.Rows(0, rows), last_delta = last_delta_.Rows(0, rows);
  Tensor last_normed = last_normed_.Rows(0, rows), logits = logits_.Rows(0, rows);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  RETURN_IF_ERROR(backend_.GatherRows(residual, meta.logit_rows, last_residual));
  if (!pending && backend_.FusesRmsNormInto(weights_->lm_head, rows)) {
    RETURN_IF_ERROR(
        backend_.RmsNormLinear(last_residual, weights_->final_norm, eps, last_normed, weights_->lm_head, logits, Tensor()));
  } else {
    if (pending) RETURN_IF_ERROR(backend_.GatherRows(delta_.Rows(0, n), meta.logit_rows, last_delta));
    RETURN_IF_ERROR(backend_.AddRmsNorm(last_residual, pending ? last_delta : Tensor(), weights_->final_norm, eps,
                                        last_normed));
    RETURN_IF_ERROR(backend_.Linear(last_normed, weights_->lm_head, logits));
  }
  if (tp_comm_ == nullptr || tp_comm_->size() == 1) return logits;
  return GatherVocabShards(logits, rows);
}

absl::StatusOr<Tensor> Decoder::GatherOrder(int32_t rows) {
  const int64_t tp = tp_comm_->size();
  const int64_t table_rows = std::min<int64_t>(limits_.logit_rows(), limits_.max_seqs);
  if (rows <= table_rows) {
    const int64_t at = tp * rows * (rows - 1) / 2;
    return gather_orders_.Rows(at, at + tp * rows);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t sh = 0; sh < tp; ++sh) gather_order_host_[r * tp + sh] = static_cast<int32_t>(sh * rows + r);
  Tensor order = gather_scratch_.Rows(0, tp * rows);
  RETURN_IF_ERROR(backend_.CopyToDevice(order, gather_order_host_.data()));
  return order;
}

absl::StatusOr<Tensor> Decoder::GatherVocabShards(Tensor local, int32_t rows) {
  // All-gather stacks the shards rank-major: gathered row s * rows + r is shard s of row r.
  // Full row r is shards 0..tp-1 side by side, i.e. viewed as [rows * tp, vocab_local] its row
  // r * tp + s; one GatherRows puts every shard in place.
  const int32_t tp = tp_comm_->size();
  Tensor gathered = gathered_logits_.Rows(0, int64_t{tp} * rows);
  RETURN_IF_ERROR(tp_comm_->AllGather(local.data(), gathered.data(), local.numel(), DType::kF32));
  ASSIGN_OR_RETURN(Tensor order, GatherOrder(rows));
  Tensor full = full_logits_.Rows(0, rows);
  RETURN_IF_ERROR(backend_.GatherRows(gathered, order, full.Reshape({int64_t{rows} * tp, dims_.vocab_local})));
  return full;
}

}  // namespace llm
