// The CPU sampler against the distribution it must draw from, computed in float64 from the same
// logits: filtered and renormalized probabilities after temperature, top-k, top-p and min-p.
// Thousands of seeds per case; every observed token must be allowed and frequencies must match.
#include <cmath>
#include <map>
#include <numeric>

#include "engine/backend/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace llm {
namespace {

constexpr int kVocab = 12;
const float kLogits[kVocab] = {2.0f, 1.5f, 1.4f, 0.3f, -0.5f, 3.1f, 0.0f, -2.0f, 1.0f, 2.2f, -1.0f, 0.7f};

// Expected probabilities in float64, following the documented pipeline, over kLogits with the
// given biases added.
std::vector<double> Expected(const SamplingParams& p, absl::Span<const LogitBias> biases = {}) {
  std::vector<double> logits(kLogits, kLogits + kVocab);
  for (const LogitBias& b : biases) logits[b.token] += b.bias;
  std::vector<int> order(kVocab);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  int keep = (p.top_k > 0 && p.top_k < kVocab) ? p.top_k : kVocab;
  std::vector<double> prob(kVocab, 0.0);
  double z = 0;
  for (int i = 0; i < keep; ++i) z += std::exp((logits[order[i]] - logits[order[0]]) / p.temperature);
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (int i = 0; i < keep; ++i) {
      cum += std::exp((logits[order[i]] - logits[order[0]]) / p.temperature);
      if (cum >= p.top_p * z) {
        keep = i + 1;
        break;
      }
    }
  }
  double total = 0;
  for (int i = 0; i < keep; ++i) {
    const double w = std::exp((logits[order[i]] - logits[order[0]]) / p.temperature);
    if (w < p.min_p) continue;  // relative to the top token's weight of 1
    prob[order[i]] = w;
    total += w;
  }
  for (double& x : prob) x /= total;
  return prob;
}

// One row of kLogits in host memory.
Buffer KLogitsRow() {
  Buffer buf = AllocateHost(kVocab * sizeof(float));
  std::copy(kLogits, kLogits + kVocab, buf.View(DType::kF32, {1, kVocab}).data_as<float>());
  return buf;
}

std::vector<int> Histogram(CpuBackend& backend, SamplingParams p, int draws, std::vector<int32_t> output = {},
                           std::vector<LogitBias> biases = {}) {
  Buffer buf = KLogitsRow();
  Tensor logits = buf.View(DType::kF32, {1, kVocab});
  std::vector<int> counts(kVocab, 0);
  for (int i = 0; i < draws; ++i) {
    p.seed = 1000003ull * i + 17;
    SampleRow row{&p, static_cast<uint64_t>(i % 7), {}, output, -1, biases};
    SampleResult result;
    EXPECT_TRUE(backend.Sample(logits, {&row, 1}, {&result, 1}).ok());
    ++counts[result.token];
  }
  return counts;
}

void ExpectMatches(const std::vector<int>& counts, const std::vector<double>& expected, int draws) {
  for (int t = 0; t < kVocab; ++t) {
    if (expected[t] == 0.0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " must be filtered out";
      continue;
    }
    // 5 standard deviations of a binomial count.
    const double mean = expected[t] * draws, sd = std::sqrt(draws * expected[t] * (1 - expected[t]));
    EXPECT_NEAR(counts[t], mean, 5 * sd + 1) << "token " << t;
  }
}

class CpuSamplerTest : public ::testing::Test {
 protected:
  CpuBackend backend_{1};
};

TEST_F(CpuSamplerTest, TemperatureOnly) {
  SamplingParams p;
  p.temperature = 0.7f;
  ExpectMatches(Histogram(backend_, p, 20000), Expected(p), 20000);
}

TEST_F(CpuSamplerTest, TopK) {
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_k = 3;
  ExpectMatches(Histogram(backend_, p, 20000), Expected(p), 20000);
}

TEST_F(CpuSamplerTest, TopP) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.6f;
  ExpectMatches(Histogram(backend_, p, 20000), Expected(p), 20000);
}

TEST_F(CpuSamplerTest, MinPWithTopK) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 6;
  p.min_p = 0.3f;
  ExpectMatches(Histogram(backend_, p, 20000), Expected(p), 20000);
}

TEST_F(CpuSamplerTest, GreedyIsArgmaxAndSeedsReproduce) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  EXPECT_EQ(Histogram(backend_, greedy, 50)[5], 50);
  SamplingParams p;
  p.temperature = 1.0f;
  EXPECT_EQ(Histogram(backend_, p, 3000), Histogram(backend_, p, 3000));
}

// Hugging Face's repetition penalty divides positive logits and multiplies negative ones, once
// per distinct token; presence/frequency subtract per generated occurrence.
TEST_F(CpuSamplerTest, PenaltiesChangeTheArgmaxAsDefined) {
  Buffer buf = KLogitsRow();
  Tensor logits = buf.View(DType::kF32, {1, kVocab});
  SamplingParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 1.5f;  // token 5: 3.1 / 1.5 = 2.07 < 2.2 (token 9)
  std::vector<int32_t> prompt = {5, 5};
  SampleRow row{&p, 0, prompt, {}, -1, {}};
  SampleResult r;
  ASSERT_TRUE(backend_.Sample(logits, {&row, 1}, {&r, 1}).ok());
  EXPECT_EQ(r.token, 9);
  SamplingParams q;
  q.temperature = 0.0f;
  q.frequency_penalty = 0.5f;  // token 5 generated twice: 3.1 - 1.0 = 2.1 < 2.2
  std::vector<int32_t> output = {5, 5};
  SampleRow row2{&q, 2, {}, output, -1, {}};
  ASSERT_TRUE(backend_.Sample(logits, {&row2, 1}, {&r, 1}).ok());
  EXPECT_EQ(r.token, 9);
  q.frequency_penalty = 0.0f;
  q.presence_penalty = 0.5f;  // once: 3.1 - 0.5 = 2.6 > 2.2
  ASSERT_TRUE(backend_.Sample(logits, {&row2, 1}, {&r, 1}).ok());
  EXPECT_EQ(r.token, 5);
  // The raw distribution's logprob is reported whatever the penalties.
  double z = 0;
  for (float x : kLogits) z += std::exp(static_cast<double>(x) - 3.1);
  EXPECT_NEAR(r.logprob, -std::log(z), 1e-5);
}

// OpenAI's logit_bias: added to the logits before temperature and truncation.
TEST_F(CpuSamplerTest, LogitBiasShiftsTheDistribution) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 8;
  const std::vector<LogitBias> biases = {{5, -2.0f}, {7, 3.5f}, {0, 0.5f}};
  ExpectMatches(Histogram(backend_, p, 20000, {}, biases), Expected(p, biases), 20000);
}

// Greedy decoding takes the biased argmax; the bias comes before the repetition penalty (vLLM's
// order); the reported logprob is the raw distribution's.
TEST_F(CpuSamplerTest, LogitBiasInGreedyDecodingAndBeforePenalties) {
  Buffer buf = KLogitsRow();
  Tensor logits = buf.View(DType::kF32, {1, kVocab});
  SamplingParams p;
  p.temperature = 0.0f;
  SampleResult r;
  const std::vector<LogitBias> force = {{7, 100.0f}}, ban = {{5, -100.0f}};
  SampleRow forced{&p, 0, {}, {}, -1, force};
  ASSERT_TRUE(backend_.Sample(logits, {&forced, 1}, {&r, 1}).ok());
  EXPECT_EQ(r.token, 7);
  double z = 0;
  for (float x : kLogits) z += std::exp(static_cast<double>(x) - 3.1);
  EXPECT_NEAR(r.logprob, -2.0 - 3.1 - std::log(z), 1e-5);  // logit of token 7 is -2.0
  SampleRow banned{&p, 0, {}, {}, -1, ban};
  ASSERT_TRUE(backend_.Sample(logits, {&banned, 1}, {&r, 1}).ok());
  EXPECT_EQ(r.token, 9);
  // Token 9: (2.2 + 2.0) / 1.5 = 2.8 < 3.1, so token 5 wins; penalizing first would give
  // 2.2 / 1.5 + 2.0 = 3.47 and token 9.
  p.repetition_penalty = 1.5f;
  const std::vector<int32_t> prompt = {9};
  const std::vector<LogitBias> lift = {{9, 2.0f}};
  SampleRow ordered{&p, 0, prompt, {}, -1, lift};
  ASSERT_TRUE(backend_.Sample(logits, {&ordered, 1}, {&r, 1}).ok());
  EXPECT_EQ(r.token, 5);
}

TEST_F(CpuSamplerTest, RejectsOutOfRangeParameters) {
  Buffer buf = KLogitsRow();
  Tensor logits = buf.View(DType::kF32, {1, kVocab});
  SamplingParams p;
  p.top_p = 0.0f;
  SampleRow row{&p, 0, {}, {}, -1, {}};
  SampleResult r;
  EXPECT_EQ(backend_.Sample(logits, {&row, 1}, {&r, 1}).code(), absl::StatusCode::kInvalidArgument);
  SamplingParams ok;
  const std::vector<LogitBias> outside = {{kVocab, 1.0f}};
  SampleRow biased{&ok, 0, {}, {}, -1, outside};
  EXPECT_EQ(backend_.Sample(logits, {&biased, 1}, {&r, 1}).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace llm
