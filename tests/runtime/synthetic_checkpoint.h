// Writes Llama-family checkpoints with random weights in the Hugging Face layout (config.json,
// safetensors single or sharded, stored f32/f16/bf16), and computes their logits with a plain
// float64 forward pass written from the published model definitions — an oracle independent of
// the engine's code, for shapes the fixtures do not cover (MQA, odd sizes, biases, q/k norms,
// sliding windows, tied embeddings, rope scaling).
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/dtype.h"
#include "nlohmann/json.hpp"

namespace llm::testing {

struct SyntheticSpec {
  std::string architecture = "LlamaForCausalLM";
  std::string model_type = "llama";
  int hidden = 64, heads = 4, kv_heads = 2, head_dim = 16, ffn = 96, vocab = 101, layers = 2;
  bool explicit_head_dim = true;
  bool qkv_bias = false, o_bias = false, mlp_bias = false, qk_norm = false, tied = false;
  int sliding_window = 0;
  double theta = 10000.0;
  bool llama3_rope = false;  // factor 4, low 1, high 4, original max 16
  DType stored = DType::kF32;
  int shards = 1;
  uint32_t seed = 1;
};

// Weights as float64 values of the stored (rounded) dtype.
struct SyntheticModel {
  SyntheticSpec spec;
  std::map<std::string, std::vector<double>> w;
  std::map<std::string, std::vector<int64_t>> shapes;
};

inline double Round(double v, DType t) {
  if (t == DType::kBF16) return Bf16ToFloat(FloatToBf16(static_cast<float>(v)));
  if (t == DType::kF16) return Fp16ToFloat(FloatToFp16(static_cast<float>(v)));
  return static_cast<float>(v);
}

inline SyntheticModel MakeSynthetic(const SyntheticSpec& s) {
  SyntheticModel m;
  m.spec = s;
  std::mt19937 rng(s.seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double scale, double offset = 0.0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<double> v(n);
    for (double& x : v) x = Round(offset + scale * normal(rng), s.stored);
    m.w[name] = v;
    m.shapes[name] = shape;
  };
  const int q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  add("model.embed_tokens.weight", {s.vocab, s.hidden}, 1.0);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {s.hidden}, 0.1, 1.0);
    add(p + "post_attention_layernorm.weight", {s.hidden}, 0.1, 1.0);
    add(p + "self_attn.q_proj.weight", {q, s.hidden}, 1.0 / std::sqrt(s.hidden));
    add(p + "self_attn.k_proj.weight", {kv, s.hidden}, 1.0 / std::sqrt(s.hidden));
    add(p + "self_attn.v_proj.weight", {kv, s.hidden}, 1.0 / std::sqrt(s.hidden));
    add(p + "self_attn.o_proj.weight", {s.hidden, q}, 1.0 / std::sqrt(q));
    if (s.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {q}, 0.2);
      add(p + "self_attn.k_proj.bias", {kv}, 0.2);
      add(p + "self_attn.v_proj.bias", {kv}, 0.2);
    }
    if (s.o_bias) add(p + "self_attn.o_proj.bias", {s.hidden}, 0.2);
    if (s.qk_norm) {
      add(p + "self_attn.q_norm.weight", {s.head_dim}, 0.1, 1.0);
      add(p + "self_attn.k_norm.weight", {s.head_dim}, 0.1, 1.0);
    }
    add(p + "mlp.gate_proj.weight", {s.ffn, s.hidden}, 1.0 / std::sqrt(s.hidden));
    add(p + "mlp.up_proj.weight", {s.ffn, s.hidden}, 1.0 / std::sqrt(s.hidden));
    add(p + "mlp.down_proj.weight", {s.hidden, s.ffn}, 1.0 / std::sqrt(s.ffn));
    if (s.mlp_bias) {
      add(p + "mlp.gate_proj.bias", {s.ffn}, 0.2);
      add(p + "mlp.up_proj.bias", {s.ffn}, 0.2);
      add(p + "mlp.down_proj.bias", {s.hidden}, 0.2);
    }
  }
  add("model.norm.weight", {s.hidden}, 0.1, 1.0);
  if (!s.tied) add("lm_head.weight", {s.vocab, s.hidden}, 1.0 / std::sqrt(s.hidden));
  return m;
}

inline void WriteSafetensors(const std::filesystem::path& file, const SyntheticModel& m,
                             const std::vector<std::string>& names) {
  const DType t = m.spec.stored;
  const char* dtype = t == DType::kBF16 ? "BF16" : t == DType::kF16 ? "F16" : "F32";
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  for (const std::string& name : names) {
    const auto& v = m.w.at(name);
    const size_t begin = data.size();
    for (double x : v) {
      if (t == DType::kF32) {
        float f = static_cast<float>(x);
        data.append(reinterpret_cast<const char*>(&f), 4);
      } else {
        uint16_t h = t == DType::kBF16 ? FloatToBf16(static_cast<float>(x)) : FloatToFp16(static_cast<float>(x));
        data.append(reinterpret_cast<const char*>(&h), 2);
      }
    }
    header[name] = {{"dtype", dtype}, {"shape", m.shapes.at(name)}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  const uint64_t len = h.size();
  std::ofstream out(file, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << h << data;
}

inline void WriteCheckpoint(const std::filesystem::path& dir, const SyntheticModel& m) {
  const SyntheticSpec& s = m.spec;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json c = {{"architectures", {s.architecture}},
                      {"model_type", s.model_type},
                      {"hidden_size", s.hidden},
                      {"intermediate_size", s.ffn},
                      {"num_hidden_layers", s.layers},
                      {"num_attention_heads", s.heads},
                      {"num_key_value_heads", s.kv_heads},
                      {"vocab_size", s.vocab},
                      {"max_position_embeddings", 256},
                      {"rms_norm_eps", 1e-5},
                      {"hidden_act", "silu"},
                      {"tie_word_embeddings", s.tied},
                      {"rope_theta", s.theta},
                      {"torch_dtype", s.stored == DType::kBF16 ? "bfloat16" : s.stored == DType::kF16 ? "float16" : "float32"}};
  if (s.explicit_head_dim) c["head_dim"] = s.head_dim;
  if (s.model_type == "llama") {
    c["attention_bias"] = s.o_bias;
    c["mlp_bias"] = s.mlp_bias;
  }
  if (s.model_type == "mistral") c["sliding_window"] = s.sliding_window > 0 ? nlohmann::json(s.sliding_window) : nlohmann::json();
  if (s.llama3_rope)
    c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 4.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 16}};
  std::ofstream(dir / "config.json") << c.dump(2);
  std::vector<std::string> names;
  for (const auto& [name, v] : m.w) names.push_back(name);
  if (s.shards <= 1) {
    WriteSafetensors(dir / "model.safetensors", m, names);
    return;
  }
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  for (int k = 0; k < s.shards; ++k) {
    std::vector<std::string> part;
    for (size_t i = k; i < names.size(); i += s.shards) part.push_back(names[i]);
    char file[64];
    std::snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", k + 1, s.shards);
    WriteSafetensors(dir / file, m, part);
    for (const auto& n : part) index["weight_map"][n] = file;
  }
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
}

// Float64 forward over `tokens`: logits [tokens.size(), vocab] at every position.
inline std::vector<double> ReferenceLogits(const SyntheticModel& m, const std::vector<int32_t>& tokens) {
  const SyntheticSpec& s = m.spec;
  const int n = static_cast<int>(tokens.size()), h = s.hidden, d = s.head_dim;
  const int q_size = s.heads * d, kv_size = s.kv_heads * d;
  auto W = [&](const std::string& name) -> const std::vector<double>& { return m.w.at(name); };
  auto has = [&](const std::string& name) { return m.w.count(name) > 0; };
  auto linear = [&](const std::vector<double>& x, int rows, int in, const std::string& name, int out) {
    std::vector<double> y(static_cast<size_t>(rows) * out, 0.0);
    const auto& w = W(name + ".weight");
    const std::vector<double>* b = has(name + ".bias") ? &W(name + ".bias") : nullptr;
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out; ++o) {
        double acc = b ? (*b)[o] : 0.0;
        for (int i = 0; i < in; ++i) acc += x[r * in + i] * w[static_cast<size_t>(o) * in + i];
        y[r * out + o] = acc;
      }
    return y;
  };
  auto rmsnorm = [&](const double* x, const std::vector<double>& w, int dim, double* out) {
    double ss = 0;
    for (int i = 0; i < dim; ++i) ss += x[i] * x[i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-5);
    for (int i = 0; i < dim; ++i) out[i] = w[i] * x[i] * inv;
  };
  // Rotary frequencies (rotate_half layout), with Llama 3 scaling when asked.
  std::vector<double> inv_freq(d / 2);
  for (int i = 0; i < d / 2; ++i) {
    double f = 1.0 / std::pow(s.theta, 2.0 * i / d);
    if (s.llama3_rope) {
      const double wavelen = 2 * M_PI / f, old = 16, lowf = 1, highf = 4, factor = 4;
      if (wavelen > old / lowf) f /= factor;
      else if (wavelen >= old / highf) {
        const double smooth = (old / wavelen - lowf) / (highf - lowf);
        f = (1 - smooth) * f / factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
  auto rope = [&](double* v, int pos) {
    for (int i = 0; i < d / 2; ++i) {
      const double a = pos * inv_freq[i], c = std::cos(a), sn = std::sin(a);
      const double x1 = v[i], x2 = v[i + d / 2];
      v[i] = x1 * c - x2 * sn;
      v[i + d / 2] = x2 * c + x1 * sn;
    }
  };
  std::vector<double> x(static_cast<size_t>(n) * h);
  for (int t = 0; t < n; ++t)
    for (int i = 0; i < h; ++i) x[t * h + i] = W("model.embed_tokens.weight")[static_cast<size_t>(tokens[t]) * h + i];
  std::vector<double> normed(x.size());
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (int t = 0; t < n; ++t) rmsnorm(&x[t * h], W(p + "input_layernorm.weight"), h, &normed[t * h]);
    auto q = linear(normed, n, h, p + "self_attn.q_proj", q_size);
    auto k = linear(normed, n, h, p + "self_attn.k_proj", kv_size);
    auto v = linear(normed, n, h, p + "self_attn.v_proj", kv_size);
    for (int t = 0; t < n; ++t) {
      for (int hh = 0; hh < s.heads; ++hh) {
        double* qh = &q[t * q_size + hh * d];
        if (s.qk_norm) rmsnorm(qh, W(p + "self_attn.q_norm.weight"), d, qh);
        rope(qh, t);
      }
      for (int hh = 0; hh < s.kv_heads; ++hh) {
        double* kh = &k[t * kv_size + hh * d];
        if (s.qk_norm) rmsnorm(kh, W(p + "self_attn.k_norm.weight"), d, kh);
        rope(kh, t);
      }
    }
    std::vector<double> attn(static_cast<size_t>(n) * q_size, 0.0);
    const int group = s.heads / s.kv_heads;
    for (int t = 0; t < n; ++t)
      for (int hh = 0; hh < s.heads; ++hh) {
        const int kvh = hh / group;
        const int first = s.sliding_window > 0 ? std::max(0, t - s.sliding_window + 1) : 0;
        std::vector<double> score(t + 1, -INFINITY);
        double mx = -INFINITY;
        for (int j = first; j <= t; ++j) {
          double dot = 0;
          for (int i = 0; i < d; ++i) dot += q[t * q_size + hh * d + i] * k[j * kv_size + kvh * d + i];
          score[j] = dot / std::sqrt(static_cast<double>(d));
          mx = std::max(mx, score[j]);
        }
        double z = 0;
        for (int j = first; j <= t; ++j) z += std::exp(score[j] - mx);
        for (int j = first; j <= t; ++j) {
          const double pj = std::exp(score[j] - mx) / z;
          for (int i = 0; i < d; ++i) attn[t * q_size + hh * d + i] += pj * v[j * kv_size + kvh * d + i];
        }
      }
    auto o = linear(attn, n, q_size, p + "self_attn.o_proj", h);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    for (int t = 0; t < n; ++t) rmsnorm(&x[t * h], W(p + "post_attention_layernorm.weight"), h, &normed[t * h]);
    auto gate = linear(normed, n, h, p + "mlp.gate_proj", s.ffn);
    auto up = linear(normed, n, h, p + "mlp.up_proj", s.ffn);
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1 + std::exp(-gate[i])) * up[i];
    auto down = linear(gate, n, s.ffn, p + "mlp.down_proj", h);
    for (size_t i = 0; i < x.size(); ++i) x[i] += down[i];
  }
  for (int t = 0; t < n; ++t) rmsnorm(&x[t * h], W("model.norm.weight"), h, &normed[t * h]);
  const std::string head = s.tied ? "model.embed_tokens" : "lm_head";
  std::vector<double> logits(static_cast<size_t>(n) * s.vocab);
  const auto& hw = W(head + ".weight");
  for (int t = 0; t < n; ++t)
    for (int vv = 0; vv < s.vocab; ++vv) {
      double acc = 0;
      for (int i = 0; i < h; ++i) acc += normed[t * h + i] * hw[static_cast<size_t>(vv) * h + i];
      logits[t * s.vocab + vv] = acc;
    }
  return logits;
}

}  // namespace llm::testing
