// The sampling pipeline, in the order Hugging Face's logits processors apply it:
// logit bias -> penalties -> (greedy argmax | temperature -> top-k -> top-p -> min-p -> draw)
// (the bias first, as vLLM applies it).
// The draw uses uniform(seed, step) (kernels/core/philox.h), so it is reproducible per request.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/backend/cpu/cpu_kernels.h"
#include "kernels/core/philox.h"

namespace llm::cpu {
namespace {

void ApplyPenalties(const SampleRow& row, float* x, SamplerScratch& s, int64_t vocab) {
  const SamplingParams& p = *row.params;
  for (const LogitBias& b : row.logit_bias) x[b.token] += b.bias;
  if (p.repetition_penalty != 1.0f) {
    // Each distinct token once: mark visited in `counts`, then clear the marks.
    auto penalize = [&](absl::Span<const int32_t> tokens) {
      for (int32_t t : tokens) {
        if (t < 0 || t >= vocab || s.counts[t] < 0) continue;
        x[t] = x[t] > 0 ? x[t] / p.repetition_penalty : x[t] * p.repetition_penalty;
        s.counts[t] = -1;
      }
    };
    penalize(row.prompt_tokens);
    penalize(row.output_tokens);
    for (int32_t t : row.prompt_tokens)
      if (t >= 0 && t < vocab) s.counts[t] = 0;
    for (int32_t t : row.output_tokens)
      if (t >= 0 && t < vocab) s.counts[t] = 0;
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    for (int32_t t : row.output_tokens)
      if (t >= 0 && t < vocab) ++s.counts[t];
    for (int32_t t : row.output_tokens) {
      if (t < 0 || t >= vocab || s.counts[t] == 0) continue;
      x[t] -= p.frequency_penalty * s.counts[t] + p.presence_penalty;
      s.counts[t] = 0;
    }
  }
}

// Log-softmax of the raw logits: the chosen token's logprob and the top-N.
void FillLogprobs(const float* raw, int64_t vocab, int32_t num_top, SampleResult& r, SamplerScratch& s) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < vocab; ++i) mx = std::max(mx, raw[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(raw[i] - mx));
  const float log_z = mx + static_cast<float>(std::log(sum));
  r.logprob = raw[r.token] - log_z;
  r.num_top = std::min<int32_t>(num_top, static_cast<int32_t>(vocab));
  if (r.num_top == 0) return;
  auto& order = s.order;
  for (int64_t i = 0; i < vocab; ++i) order[i] = static_cast<int32_t>(i);
  auto greater = [&](int32_t a, int32_t b) { return raw[a] > raw[b] || (raw[a] == raw[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + r.num_top, order.begin() + vocab, greater);
  for (int i = 0; i < r.num_top; ++i) r.top[i] = {order[i], raw[order[i]] - log_z};
}

int32_t Argmax(const float* x, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (x[i] > x[best]) best = i;  // ties: lowest id
  return static_cast<int32_t>(best);
}

int32_t Draw(const SampleRow& row, float* x, int64_t vocab, SamplerScratch& s) {
  const SamplingParams& p = *row.params;
  auto& order = s.order;
  for (int64_t i = 0; i < vocab; ++i) x[i] /= p.temperature;
  int64_t n = vocab;  // candidates are order[0, n)
  for (int64_t i = 0; i < vocab; ++i) order[i] = static_cast<int32_t>(i);
  auto greater = [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  const bool need_sorted = p.top_p < 1.0f;
  if (p.top_k > 0 && p.top_k < vocab) {
    n = p.top_k;
    std::nth_element(order.begin(), order.begin() + (n - 1), order.begin() + vocab, greater);
  }
  if (need_sorted) std::sort(order.begin(), order.begin() + n, greater);
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[order[i]]);
  // Unnormalized probabilities of the candidates, in `values` aligned with `order`.
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    s.values[i] = std::exp(x[order[i]] - mx);
    total += s.values[i];
  }
  if (need_sorted) {  // smallest prefix whose mass reaches top_p
    double cum = 0.0;
    int64_t keep = n;
    for (int64_t i = 0; i < n; ++i) {
      cum += s.values[i];
      if (cum >= p.top_p * total) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p.min_p > 0.0f) {  // drop candidates under min_p x the top probability (exp(0) = 1 here)
    int64_t w = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (s.values[i] >= p.min_p) {
        s.values[w] = s.values[i];
        order[w] = order[i];
        ++w;
      }
    }
    n = w;
  }
  total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += s.values[i];
  const double target = UniformFloat(p.seed, row.step) * total;
  double cum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    cum += s.values[i];
    if (target < cum) return order[i];
  }
  return order[n - 1];
}

}  // namespace

void SampleRows(ThreadPool& pool, const float* logits, int64_t vocab, absl::Span<const SampleRow> rows,
                absl::Span<SampleResult> results, std::vector<SamplerScratch>& scratch) {
  scratch.resize(pool.num_threads());
  pool.ParallelFor(static_cast<int64_t>(rows.size()), 1, [&](int64_t begin, int64_t end, int thread) {
    SamplerScratch& s = scratch[thread];
    if (static_cast<int64_t>(s.values.size()) < 2 * vocab) {  // first use only
      s.values.resize(2 * vocab);
      s.order.resize(vocab);
      s.counts.assign(vocab, 0);
    }
    for (int64_t r = begin; r < end; ++r) {
      const SampleRow& row = rows[r];
      const float* raw = logits + r * vocab;
      float* x = s.values.data() + vocab;  // working copy; values[0, vocab) holds probabilities
      std::copy(raw, raw + vocab, x);
      ApplyPenalties(row, x, s, vocab);
      SampleResult& out = results[r];
      out.token = row.params->temperature <= 0.0f ? Argmax(x, vocab) : Draw(row, x, vocab, s);
      FillLogprobs(raw, vocab, row.params->num_top_logprobs, out, s);
    }
  });
}

}  // namespace llm::cpu
