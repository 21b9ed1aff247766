// The control-plane wire formats of engine/distributed/step_message.h: what the scheduling rank
// sends each step and what the last pipeline stage sends back. Round trips, sizes, and malformed
// bytes rejected with DataLoss instead of being read past their end.
#include "engine/distributed/step_message.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace llm {
namespace {

std::vector<SampleResult> Results(int n, int top) {
  std::vector<SampleResult> r(n);
  for (int i = 0; i < n; ++i) {
    r[i].token = 1000 + i;
    r[i].logprob = -0.25f * static_cast<float>(i);
    r[i].num_top = top;
    for (int k = 0; k < top; ++k) r[i].top[k] = {i * 100 + k, -1.0f - static_cast<float>(k)};
  }
  return r;
}

TEST(SampleResultsTest, RoundTripWithAndWithoutTopLogprobs) {
  for (int top : {0, 3, kMaxTopLogprobs}) {
    const std::vector<SampleResult> sent = Results(128, top);
    std::string bytes;
    EncodeSampleResults(sent, bytes);
    std::vector<SampleResult> got(sent.size());
    ASSERT_TRUE(DecodeSampleResults(bytes, absl::MakeSpan(got)).ok()) << top;
    for (size_t i = 0; i < sent.size(); ++i) {
      EXPECT_EQ(got[i].token, sent[i].token);
      EXPECT_EQ(got[i].logprob, sent[i].logprob);
      ASSERT_EQ(got[i].num_top, top);
      for (int k = 0; k < top; ++k) {
        EXPECT_EQ(got[i].top[k].token, sent[i].top[k].token);
        EXPECT_EQ(got[i].top[k].logprob, sent[i].top[k].logprob);
      }
    }
  }
}

// Without top logprobs a row is 12 bytes: a 128-row micro-batch stays under MPI's eager limits.
TEST(SampleResultsTest, RowsWithoutTopLogprobsAreSmall) {
  std::string bytes;
  EncodeSampleResults(Results(128, 0), bytes);
  EXPECT_EQ(bytes.size(), 8u + 128u * 12u);
}

TEST(SampleResultsTest, MalformedBytesAreRejected) {
  std::string bytes;
  EncodeSampleResults(Results(4, 2), bytes);
  std::vector<SampleResult> got(4), wrong_count(5);
  EXPECT_EQ(DecodeSampleResults(bytes, absl::MakeSpan(wrong_count)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeSampleResults(bytes.substr(0, bytes.size() - 1), absl::MakeSpan(got)).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeSampleResults(bytes + "x", absl::MakeSpan(got)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeSampleResults("", absl::MakeSpan(got)).code(), absl::StatusCode::kDataLoss);
  std::string bad_top = bytes;
  const int32_t huge = kMaxTopLogprobs + 1;
  bad_top.replace(8 + 8, 4, reinterpret_cast<const char*>(&huge), 4);  // first row's num_top
  EXPECT_EQ(DecodeSampleResults(bad_top, absl::MakeSpan(got)).code(), absl::StatusCode::kDataLoss);
}

TEST(StepMessageTest, RoundTripAndTruncation) {
  StepPlan plan;
  plan.block_table_width = 4;
  plan.AddSequence(std::vector<int32_t>{5, 6, 7}, 0, std::vector<int32_t>{2, 9}, 16, true);
  plan.AddSequence(std::vector<int32_t>{8}, 20, std::vector<int32_t>{3, 4}, 16, true);
  SamplingParams greedy, penalized;
  penalized.repetition_penalty = 1.2f;
  const std::vector<int32_t> prompt = {5, 6, 7}, output = {1};
  const std::vector<LogitBias> biases = {{2, -100.0f}, {7, 1.5f}};
  const std::vector<SampleRow> rows = {{&greedy, 3, prompt, output, -1, biases},
                                       {&penalized, 4, prompt, output, 3, {}}};
  std::string bytes;
  EncodeStepMessage(plan, rows, bytes);
  StepMessage m;
  ASSERT_TRUE(DecodeStepMessage(bytes, m).ok());
  EXPECT_EQ(m.plan.token_ids, plan.token_ids);
  EXPECT_EQ(m.plan.positions, plan.positions);
  EXPECT_EQ(m.plan.slot_mapping, plan.slot_mapping);
  EXPECT_EQ(m.plan.block_tables, plan.block_tables);
  ASSERT_EQ(m.rows.size(), 2u);
  EXPECT_EQ(m.rows[0].step, 3u);
  EXPECT_TRUE(m.rows[0].prompt_tokens.empty()) << "greedy rows carry no token history";
  EXPECT_EQ(std::vector<int32_t>(m.rows[1].prompt_tokens.begin(), m.rows[1].prompt_tokens.end()), prompt);
  EXPECT_EQ(m.rows[1].params->repetition_penalty, 1.2f);
  EXPECT_EQ(m.rows[0].pending_input_index, -1);
  EXPECT_EQ(m.rows[1].pending_input_index, 3) << "a pending token counts for penalties on every rank";
  ASSERT_EQ(m.rows[0].logit_bias.size(), 2u) << "every rank that samples applies the biases";
  EXPECT_EQ(m.rows[0].logit_bias[1].token, 7);
  EXPECT_EQ(m.rows[0].logit_bias[1].bias, 1.5f);
  EXPECT_TRUE(m.rows[1].logit_bias.empty());
  StepMessage truncated;
  EXPECT_EQ(DecodeStepMessage(bytes.substr(0, bytes.size() - 3), truncated).code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace llm
