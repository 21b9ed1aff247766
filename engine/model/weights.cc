#include "engine/model/weights.h"

#include <cstring>
#include <functional>
#include <string>

#include "absl/strings/str_cat.h"

namespace llm {
namespace {

// A rectangular piece of a checkpoint tensor, viewed as [rows, cols] (1-D tensors: one row),
// copied to a destination rows range at a column offset.
struct Piece {
  const TensorRecord* src = nullptr;
  int64_t src_row = 0, src_col = 0;
  int64_t rows = 0, cols = 0;
  int64_t dst_row = 0, dst_col = 0;
};

// One destination tensor assembled from pieces; unfilled elements are zero (vocab padding).
struct Assembly {
  Tensor* dst = nullptr;
  Shape shape;
  std::vector<Piece> pieces;
  int64_t fill_from = -1;  // elements from here on get `fill` instead of 0
  float fill = 0.0f;
};

int64_t RecordCols(const TensorRecord& r) { return r.shape.size() == 2 ? r.shape[1] : r.numel(); }

class Loader {
 public:
  Loader(const ModelConfig& c, const internal::TensorLookup& lookup, const internal::TensorFill& fill,
         const LocalDims& d, const ShardSpec& s)
      : c_(c), lookup_(lookup), fill_(fill), d_(d), s_(s) {}

  absl::StatusOr<std::unique_ptr<ModelWeights>> Run(Backend& backend);

 private:
  absl::StatusOr<const TensorRecord*> Get(const std::string& name, std::vector<int64_t> shape) {
    return lookup_(name, shape);
  }
  // Whole tensor into `dst` of `shape`.
  absl::Status Whole(Tensor* dst, const std::string& name, std::vector<int64_t> shape) {
    ASSIGN_OR_RETURN(const TensorRecord* r, Get(name, shape));
    Shape s;
    if (shape.size() == 1) s = Shape({shape[0]});
    else s = Shape({shape[0], shape[1]});
    const int64_t rows = shape.size() == 2 ? shape[0] : 1;
    plan_.push_back({dst, s, {{r, 0, 0, rows, RecordCols(*r), 0, 0}}});
    return absl::OkStatus();
  }
  absl::Status PlanLayer(int64_t layer, LayerWeights& w);
  absl::Status PlanVocab(Tensor* dst, const std::string& name);

  const ModelConfig& c_;
  const internal::TensorLookup& lookup_;
  const internal::TensorFill& fill_;  // null: copy checkpoint slices
  const LocalDims& d_;
  const ShardSpec& s_;
  std::vector<Assembly> plan_;
};

absl::Status Loader::PlanVocab(Tensor* dst, const std::string& name) {
  ASSIGN_OR_RETURN(const TensorRecord* r, Get(name, {d_.vocab, d_.hidden}));
  const int64_t rows = std::max<int64_t>(0, std::min(d_.vocab, d_.vocab_offset + d_.vocab_local) - d_.vocab_offset);
  plan_.push_back({dst, Shape({d_.vocab_local, d_.hidden}), {{r, d_.vocab_offset, 0, rows, d_.hidden, 0, 0}}});
  return absl::OkStatus();
}

absl::Status Loader::PlanLayer(int64_t layer, LayerWeights& w) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  const int64_t h = d_.hidden, hd = d_.head_dim;
  const int64_t q_rows = d_.num_heads * hd, kv_rows = d_.num_kv_heads * hd;
  const int64_t q_full = c_.num_heads * hd, kv_full = c_.num_kv_heads * hd;
  // KV heads: split when there are at least as many as ranks, else replicate.
  const int64_t kv_first_head = c_.num_kv_heads >= s_.tp_size
                                    ? s_.tp_rank * d_.num_kv_heads
                                    : s_.tp_rank / (s_.tp_size / c_.num_kv_heads);
  const int64_t q_first = s_.tp_rank * q_rows, kv_first = kv_first_head * hd;

  RETURN_IF_ERROR(Whole(&w.input_norm, p + "input_layernorm.weight", {h}));
  RETURN_IF_ERROR(Whole(&w.post_attention_norm, p + "post_attention_layernorm.weight", {h}));

  // Fused QKV, column-parallel.
  const std::string a = p + "self_attn.";
  ASSIGN_OR_RETURN(auto* q, Get(a + "q_proj.weight", {q_full, h}));
  ASSIGN_OR_RETURN(auto* k, Get(a + "k_proj.weight", {kv_full, h}));
  ASSIGN_OR_RETURN(auto* v, Get(a + "v_proj.weight", {kv_full, h}));
  plan_.push_back({&w.qkv.weight, Shape({q_rows + 2 * kv_rows, h}),
                   {{q, q_first, 0, q_rows, h, 0, 0},
                    {k, kv_first, 0, kv_rows, h, q_rows, 0},
                    {v, kv_first, 0, kv_rows, h, q_rows + kv_rows, 0}}});
  if (c_.qkv_bias) {
    ASSIGN_OR_RETURN(auto* qb, Get(a + "q_proj.bias", {q_full}));
    ASSIGN_OR_RETURN(auto* kb, Get(a + "k_proj.bias", {kv_full}));
    ASSIGN_OR_RETURN(auto* vb, Get(a + "v_proj.bias", {kv_full}));
    plan_.push_back({&w.qkv.bias, Shape({q_rows + 2 * kv_rows}),
                     {{qb, 0, q_first, 1, q_rows, 0, 0},
                      {kb, 0, kv_first, 1, kv_rows, 0, q_rows},
                      {vb, 0, kv_first, 1, kv_rows, 0, q_rows + kv_rows}}});
  }
  if (c_.qk_norm) {
    RETURN_IF_ERROR(Whole(&w.q_norm, a + "q_norm.weight", {hd}));
    RETURN_IF_ERROR(Whole(&w.k_norm, a + "k_norm.weight", {hd}));
  }
  // o_proj, row-parallel: this rank's input columns; the bias once (rank 0), after the sum.
  ASSIGN_OR_RETURN(auto* o, Get(a + "o_proj.weight", {h, q_full}));
  plan_.push_back({&w.o_proj.weight, Shape({h, q_rows}), {{o, 0, q_first, h, q_rows, 0, 0}}});
  if (c_.o_bias && s_.tp_rank == 0) RETURN_IF_ERROR(Whole(&w.o_proj.bias, a + "o_proj.bias", {h}));

  // Fused gate/up, column-parallel; down, row-parallel.
  const std::string m = p + "mlp.";
  const int64_t f = d_.ffn, f_first = s_.tp_rank * f;
  ASSIGN_OR_RETURN(auto* gate, Get(m + "gate_proj.weight", {c_.intermediate_size, h}));
  ASSIGN_OR_RETURN(auto* up, Get(m + "up_proj.weight", {c_.intermediate_size, h}));
  plan_.push_back({&w.gate_up.weight, Shape({2 * f, h}), {{gate, f_first, 0, f, h, 0, 0}, {up, f_first, 0, f, h, f, 0}}});
  ASSIGN_OR_RETURN(auto* down, Get(m + "down_proj.weight", {h, c_.intermediate_size}));
  plan_.push_back({&w.down.weight, Shape({h, f}), {{down, 0, f_first, h, f, 0, 0}}});
  if (c_.mlp_bias) {
    ASSIGN_OR_RETURN(auto* gb, Get(m + "gate_proj.bias", {c_.intermediate_size}));
    ASSIGN_OR_RETURN(auto* ub, Get(m + "up_proj.bias", {c_.intermediate_size}));
    plan_.push_back({&w.gate_up.bias, Shape({2 * f}), {{gb, 0, f_first, 1, f, 0, 0}, {ub, 0, f_first, 1, f, 0, f}}});
    if (s_.tp_rank == 0) RETURN_IF_ERROR(Whole(&w.down.bias, m + "down_proj.bias", {h}));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ModelWeights>> Loader::Run(Backend& backend) {
  auto weights = std::make_unique<ModelWeights>();
  ModelWeights& w = *weights;
  w.layers.resize(d_.end_layer - d_.first_layer);
  const bool need_embedding = d_.is_first_stage || (d_.is_last_stage && c_.tie_word_embeddings);
  if (need_embedding) RETURN_IF_ERROR(PlanVocab(&w.embedding, "model.embed_tokens.weight"));
  for (int64_t l = d_.first_layer; l < d_.end_layer; ++l) RETURN_IF_ERROR(PlanLayer(l, w.layers[l - d_.first_layer]));
  if (d_.is_last_stage) {
    RETURN_IF_ERROR(Whole(&w.final_norm, "model.norm.weight", {d_.hidden}));
    if (!c_.tie_word_embeddings) RETURN_IF_ERROR(PlanVocab(&w.lm_head.weight, "lm_head.weight"));
    // A vocabulary that does not split evenly over TP ranks is padded; the padded rows' logits
    // are pushed to -1e30 so that no sampler can ever pick them.
    const int64_t valid = std::max<int64_t>(0, std::min(d_.vocab_local, d_.vocab - d_.vocab_offset));
    if (valid < d_.vocab_local) {
      Assembly bias{&w.lm_head.bias, Shape({d_.vocab_local}), {}};
      bias.fill_from = valid;
      bias.fill = -1e30f;
      plan_.push_back(bias);
    }
  }

  // One allocation for the whole shard, then each tensor assembled on the host and uploaded.
  const DType dtype = backend.activation_dtype();
  constexpr size_t kAlign = 256;
  size_t total = 0, largest = 0;
  for (const Assembly& a : plan_) {
    total = (total + kAlign - 1) / kAlign * kAlign + a.shape.numel() * DTypeSize(dtype);
    largest = std::max<size_t>(largest, a.shape.numel());
  }
  ASSIGN_OR_RETURN(Buffer memory, backend.Allocate(total));
  Arena arena(std::move(memory));
  std::vector<float> staging;  // grown to `largest` when first needed
  for (Assembly& a : plan_) {
    ASSIGN_OR_RETURN(*a.dst, arena.Take(dtype, a.shape, kAlign));
    if (fill_ && !a.pieces.empty()) {
      RETURN_IF_ERROR(fill_(*a.dst, a.pieces.front().src->name));
      continue;
    }
    if (staging.size() < static_cast<size_t>(a.shape.numel())) staging.resize(fill_ ? a.shape.numel() : largest);
    const int64_t dst_cols = a.shape.rank() == 2 ? a.shape[1] : a.shape.numel();
    std::fill(staging.begin(), staging.begin() + a.shape.numel(), 0.0f);
    if (a.fill_from >= 0) std::fill(staging.begin() + a.fill_from, staging.begin() + a.shape.numel(), a.fill);
    for (const Piece& p : a.pieces) {
      const int64_t src_cols = RecordCols(*p.src);
      const size_t elem = DTypeSize(p.src->dtype);
      for (int64_t r = 0; r < p.rows; ++r) {
        const char* src = static_cast<const char*>(p.src->data) + ((p.src_row + r) * src_cols + p.src_col) * elem;
        ConvertToFloat(p.src->dtype, src, staging.data() + (p.dst_row + r) * dst_cols + p.dst_col, p.cols);
      }
    }
    RETURN_IF_ERROR(backend.UploadConverted(staging.data(), DType::kF32, *a.dst));
    RETURN_IF_ERROR(backend.Synchronize());  // staging is reused by the next tensor
  }
  if (fill_) RETURN_IF_ERROR(backend.Synchronize());
  if (d_.is_last_stage && c_.tie_word_embeddings) w.lm_head.weight = w.embedding;
  w.bytes = arena.used();
  // The arena's buffer must outlive the views: move it into the weights.
  w.memory = std::move(arena).Release();
  return weights;
}

}  // namespace

absl::StatusOr<LocalDims> ComputeLocalDims(const ModelConfig& c, const ShardSpec& s) {
  LocalDims d;
  const int64_t tp = s.tp_size;
  if (tp < 1 || s.tp_rank < 0 || s.tp_rank >= tp) return absl::InvalidArgumentError("bad tensor-parallel rank");
  if (c.num_heads % tp != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads (", c.num_heads, ") is not divisible by tensor parallelism ", tp));
  if (c.num_kv_heads >= tp ? c.num_kv_heads % tp != 0 : tp % c.num_kv_heads != 0)
    return absl::InvalidArgumentError(absl::StrCat("num_key_value_heads (", c.num_kv_heads,
                                                   ") and tensor parallelism ", tp,
                                                   " must divide one another"));
  if (c.intermediate_size % tp != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("intermediate_size (", c.intermediate_size, ") is not divisible by tensor parallelism ", tp));
  d.hidden = c.hidden_size;
  d.head_dim = c.head_dim;
  d.num_heads = c.num_heads / tp;
  d.num_kv_heads = std::max<int64_t>(1, c.num_kv_heads / tp);
  d.ffn = c.intermediate_size / tp;
  d.vocab = c.vocab_size;
  d.vocab_local = (c.vocab_size + tp - 1) / tp;
  d.vocab_offset = s.tp_rank * d.vocab_local;
  d.first_layer = s.first_layer;
  d.end_layer = s.end_layer < 0 ? c.num_layers : s.end_layer;
  if (d.first_layer < 0 || d.first_layer >= d.end_layer || d.end_layer > c.num_layers)
    return absl::InvalidArgumentError(absl::StrCat("bad layer range [", d.first_layer, ", ", d.end_layer,
                                                   ") for a model of ", c.num_layers, " layers"));
  d.is_first_stage = d.first_layer == 0;
  d.is_last_stage = d.end_layer == c.num_layers;
  return d;
}

absl::StatusOr<std::unique_ptr<ModelWeights>> LoadWeights(const ModelConfig& config, const Checkpoint& checkpoint,
                                                          const ShardSpec& shard, Backend& backend) {
  const internal::TensorLookup lookup = [&](const std::string& name, const std::vector<int64_t>& shape) {
    return checkpoint.FindFloat(name, shape);
  };
  return internal::BuildWeights(config, shard, backend, lookup, nullptr);
}

namespace internal {

absl::StatusOr<std::unique_ptr<ModelWeights>> BuildWeights(const ModelConfig& config, const ShardSpec& shard,
                                                           Backend& backend, const TensorLookup& lookup,
                                                           const TensorFill& fill) {
  ASSIGN_OR_RETURN(LocalDims dims, ComputeLocalDims(config, shard));
  Loader loader(config, lookup, fill, dims, shard);
  return loader.Run(backend);
}

}  // namespace internal

}  // namespace llm
