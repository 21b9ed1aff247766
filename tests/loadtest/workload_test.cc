#include "server/loadtest/workload.h"

#include <map>

#include "gtest/gtest.h"

namespace llm::loadtest {
namespace {

// Counts 1 token per word (the server's Tokenize in the real thing), +1 for special tokens.
absl::StatusOr<int64_t> CountWords(const std::string& text, bool special) {
  int64_t words = 0;
  bool in_word = false;
  for (char c : text) {
    if (c != ' ' && !in_word) ++words;
    in_word = c != ' ';
  }
  return words + (special ? 1 : 0);
}

TEST(WorkloadTest, SyntheticRequestsHaveTheirLengths) {
  WorkloadOptions o;
  o.input_len = *LengthDistribution::Parse("uniform:5:20");
  o.output_len = LengthDistribution::Fixed(7);
  o.temperature = 0.5;
  auto w =
      Workload::Create(o, {/*vocab_size=*/100, /*context_length=*/64, /*has_tokenizer=*/false}, CountWords);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < 200; ++i) {
    const RequestSpec s = (*w)->Next();
    ASSERT_EQ(s.request->token_ids().ids_size(), s.prompt_len);
    ASSERT_GE(s.prompt_len, 5);
    ASSERT_LE(s.prompt_len, 20);
    for (int32_t id : s.request->token_ids().ids()) ASSERT_TRUE(id >= 0 && id < 100);
    EXPECT_EQ(s.request->stopping().max_tokens(), 7);
    EXPECT_TRUE(s.request->stopping().ignore_eos());
    EXPECT_FLOAT_EQ(s.request->sampling().temperature(), 0.5f);
  }
  EXPECT_EQ((*w)->clipped_requests(), 0);
}

TEST(WorkloadTest, ClipsOutputsToTheContext) {
  WorkloadOptions o;
  o.input_len = LengthDistribution::Fixed(50);
  o.output_len = LengthDistribution::Fixed(30);
  auto w = Workload::Create(o, {100, 64, false}, CountWords);
  ASSERT_TRUE(w.ok());
  const RequestSpec s = (*w)->Next();
  EXPECT_EQ(s.prompt_len + s.output_len, 64);
  EXPECT_EQ((*w)->clipped_requests(), 1);
  o.input_len = LengthDistribution::Fixed(64);
  EXPECT_FALSE(Workload::Create(o, {100, 64, false}, CountWords).ok());
}

Dataset SmallDataset() {
  Dataset d;
  d.entries.push_back({"one two three", {}, 0, 4, ""});
  d.entries.push_back({"alpha beta", {}, 0, 0, "a reply of five words"});
  d.entries.push_back({"", {3, 4, 5}, 3, 2, ""});
  d.entries.push_back({"too long for the context window of this model", {}, 0, 60, ""});
  d.skipped = 1;
  return d;
}

TEST(WorkloadTest, DatasetWithATokenizerSendsText) {
  WorkloadOptions o;
  o.dataset = SmallDataset();
  auto w = Workload::Create(o, {100, 64, /*has_tokenizer=*/true}, CountWords);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->skipped_entries(), 2);  // one in the file, one too long
  std::map<std::string, RequestSpec> by_prompt;
  for (int i = 0; i < 6; ++i) {
    const RequestSpec s = (*w)->Next();
    by_prompt[s.request->has_text() ? s.request->text() : "ids"] = s;
  }
  ASSERT_EQ(by_prompt.size(), 3u);                      // cycled
  EXPECT_EQ(by_prompt["one two three"].prompt_len, 4);  // 3 words + a special token
  EXPECT_EQ(by_prompt["one two three"].output_len, 4);
  EXPECT_EQ(by_prompt["alpha beta"].output_len, 5);  // the reply's tokens, no special token
  EXPECT_EQ(by_prompt["ids"].request->token_ids().ids_size(), 3);
  EXPECT_EQ(by_prompt["ids"].request->stopping().max_tokens(), 2);
}

TEST(WorkloadTest, DatasetWithoutATokenizerSendsRandomIdsOfTheEstimatedLength) {
  WorkloadOptions o;
  o.dataset = SmallDataset();
  o.override_output_len = true;
  o.output_len = LengthDistribution::Fixed(3);
  auto w = Workload::Create(o, {100, 64, /*has_tokenizer=*/false}, CountWords);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < 8; ++i) {
    const RequestSpec s = (*w)->Next();
    EXPECT_FALSE(s.request->has_text());
    EXPECT_EQ(s.request->token_ids().ids_size(), s.prompt_len);
    EXPECT_EQ(s.output_len, 3);
  }
  // "one two three" is 13 characters: 3 tokens at 4 characters a token.
  EXPECT_EQ((*w)->skipped_entries(), 1);  // with output 3, the long prompt fits
}

}  // namespace
}  // namespace llm::loadtest
