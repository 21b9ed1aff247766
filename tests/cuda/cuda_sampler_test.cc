// The GPU sampler against the CPU sampler: greedy, temperature, top-k, top-p, min-p, penalties,
// logit biases, seeds and log-probabilities, on vocabularies of 1000, 32003 and 128256.
#include <algorithm>
#include <random>
#include <set>

#include "tests/cuda/cuda_test_util.h"

namespace llm {
namespace {

using testing::OwnedTensor;
using testing::Upload;

struct SamplerHarness {
  std::unique_ptr<CudaBackend> gpu = testing::MakeCuda(DType::kBF16);
  CpuBackend cpu{0};

  // Samples rows of `logits` [rows, vocab] on both backends.
  void Run(const std::vector<float>& logits, int64_t vocab, const std::vector<SampleRow>& rows,
           std::vector<SampleResult>& got, std::vector<SampleResult>& want) {
    const int64_t n = static_cast<int64_t>(rows.size());
    OwnedTensor d = Upload(*gpu, DType::kF32, {n, vocab}, logits), h = Upload(cpu, DType::kF32, {n, vocab}, logits);
    got.assign(n, {});
    want.assign(n, {});
    const auto st = gpu->Sample(d.t, rows, absl::MakeSpan(got));
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(cpu.Sample(h.t, rows, absl::MakeSpan(want)).ok());
  }
};

std::vector<float> Logits(std::mt19937& rng, int64_t rows, int64_t vocab, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(rows * vocab);
  for (float& x : v) x = d(rng);
  return v;
}

void ExpectLogprobs(const SampleResult& got, const SampleResult& want, const std::string& what) {
  EXPECT_NEAR(got.logprob, want.logprob, 2e-4 * std::max(1.0f, std::fabs(want.logprob))) << what;
  ASSERT_EQ(got.num_top, want.num_top) << what;
  for (int i = 0; i < want.num_top; ++i) {
    EXPECT_EQ(got.top[i].token, want.top[i].token) << what << " top " << i;
    EXPECT_NEAR(got.top[i].logprob, want.top[i].logprob, 2e-4 * std::max(1.0f, std::fabs(want.top[i].logprob)))
        << what << " top " << i;
  }
}

TEST(CudaSamplerTest, MatchesCpuSampler) {
  SamplerHarness h;
  ASSERT_NE(h.gpu, nullptr);
  std::mt19937 rng(7);
  for (int64_t vocab : {1000, 32003, 128256}) {  // 32003: rows not 16-byte aligned
    std::vector<SamplingParams> params;
    auto add = [&](float temp, int top_k, float top_p, float min_p, float rep, float pres, float freq, int logprobs) {
      SamplingParams p;
      p.temperature = temp;
      p.top_k = top_k;
      p.top_p = top_p;
      p.min_p = min_p;
      p.repetition_penalty = rep;
      p.presence_penalty = pres;
      p.frequency_penalty = freq;
      p.num_top_logprobs = logprobs;
      p.seed = rng();
      params.push_back(p);
    };
    add(0.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 5);     // greedy
    add(0.0f, 0, 1.0f, 0.0f, 1.5f, 0.4f, 0.3f, 20);    // greedy with penalties
    add(1.0f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0);     // plain sampling
    add(0.7f, 0, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 3);     // temperature
    add(1.0f, 0, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0);     // top-p
    add(0.8f, 50, 0.8f, 0.0f, 1.0f, 0.0f, 0.0f, 1);    // top-k + top-p
    add(1.0f, 0, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 0);    // min-p
    add(1.2f, 0, 0.95f, 0.02f, 1.0f, 0.0f, 0.0f, 0);   // top-p + min-p
    add(1.0f, 0, 1.0f, 0.0f, 1.3f, 0.5f, 0.25f, 2);    // penalties + sampling
    add(0.9f, 40, 0.7f, 0.0f, 1.1f, 0.0f, 0.5f, 0);    // everything
    add(1.0f, 1, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0);     // top-k 1 == greedy
    add(5.0f, 0, 0.5f, 0.0f, 1.0f, 0.0f, 0.0f, 0);     // hot, wide nucleus
    for (int trial = 0; trial < 4; ++trial) {
      // The last trial of the 128k vocabulary: 180 rows (92 MB of logits, more than an H100's or
      // H200's L2), which the sampler's form that streams rows from DRAM takes.
      const int64_t reps = vocab == 128256 && trial == 3 ? 15 : 1;
      const int64_t n = static_cast<int64_t>(params.size()) * reps;
      const std::vector<float> logits = Logits(rng, n, vocab, trial == 0 ? 1.0f : 3.0f);
      std::vector<std::vector<int32_t>> prompts(n), outputs(n);
      std::vector<std::vector<LogitBias>> biases(n);
      std::vector<SampleRow> rows(n);
      std::uniform_real_distribution<float> bias(-4.0f, 4.0f);
      for (int64_t r = 0; r < n; ++r) {
        for (int i = 0; i < 50; ++i) prompts[r].push_back(static_cast<int32_t>(rng() % vocab));
        for (int i = 0; i < 20; ++i) outputs[r].push_back(static_cast<int32_t>(rng() % std::min<int64_t>(vocab, 64)));
        outputs[r].push_back(static_cast<int32_t>(vocab + 5));  // out of range: ignored
        if ((r + trial) % 3 != 0) {
          // Logit biases on every other row or so: distinct tokens, some of them also penalized
          // (in the prompt or output), one of them now and then forced or banned outright.
          std::set<int32_t> tokens(prompts[r].begin(), prompts[r].begin() + 10);
          tokens.insert(outputs[r].begin(), outputs[r].begin() + 10);
          while (tokens.size() < 40) tokens.insert(static_cast<int32_t>(rng() % vocab));
          for (int32_t t : tokens) biases[r].push_back({t, bias(rng)});
          if (r % 4 == 1) biases[r][r % biases[r].size()].bias = r % 8 == 1 ? 100.0f : -100.0f;
        }
        rows[r] = SampleRow{&params[r % params.size()], static_cast<uint64_t>(trial * 3 + r), prompts[r], outputs[r],
                            -1, biases[r]};
      }
      std::vector<SampleResult> got, want;
      h.Run(logits, vocab, rows, got, want);
      for (int64_t r = 0; r < n; ++r) {
        const std::string what = "vocab " + std::to_string(vocab) + " trial " + std::to_string(trial) + " row " +
                                 std::to_string(r);
        EXPECT_EQ(got[r].token, want[r].token) << what;
        ExpectLogprobs(got[r], want[r], what);
      }
      // Same seeds and steps: the same tokens again (no dependence on scheduling).
      std::vector<SampleResult> again, unused;
      h.Run(logits, vocab, rows, again, unused);
      for (int64_t r = 0; r < n; ++r) EXPECT_EQ(again[r].token, got[r].token);
    }
  }
}

// Top-k alone: the CPU walks its candidates in std::nth_element's order, so only membership in
// the top-k set is comparable; over many draws every token drawn is among the k best.
TEST(CudaSamplerTest, TopKDrawsOnlyTopK) {
  SamplerHarness h;
  ASSERT_NE(h.gpu, nullptr);
  std::mt19937 rng(11);
  const int64_t vocab = 5000, n = 64;
  const std::vector<float> logits = Logits(rng, n, vocab, 2.0f);
  std::vector<SamplingParams> params(n);
  std::vector<SampleRow> rows(n);
  for (int64_t r = 0; r < n; ++r) {
    params[r].temperature = 1.0f;
    params[r].top_k = 10;
    params[r].seed = 99;
    rows[r] = SampleRow{};
    rows[r].params = &params[r];
    rows[r].step = static_cast<uint64_t>(r);
  }
  std::vector<SampleResult> got, want;
  h.Run(logits, vocab, rows, got, want);
  std::set<int32_t> distinct;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<int32_t> order(vocab);
    std::iota(order.begin(), order.end(), 0);
    const float* x = &logits[r * vocab];
    std::partial_sort(order.begin(), order.begin() + 10, order.end(), [&](int a, int b) { return x[a] > x[b]; });
    EXPECT_NE(std::find(order.begin(), order.begin() + 10, got[r].token), order.begin() + 10) << "row " << r;
    distinct.insert(got[r].token);
  }
  EXPECT_GT(distinct.size(), 10u);  // not collapsed onto one token
}

}  // namespace
}  // namespace llm
