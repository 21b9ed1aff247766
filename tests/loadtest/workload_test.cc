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
  o.top_p = 0.9;
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
    EXPECT_FLOAT_EQ(s.request->sampling().top_p(), 0.9f);
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

std::vector<int32_t> Ids(const RequestSpec& s) {
  return std::vector<int32_t>(s.request->token_ids().ids().begin(), s.request->token_ids().ids().end());
}

TEST(WorkloadTest, SharedPrefixesStartEveryPrompt) {
  WorkloadOptions o;
  o.input_len = LengthDistribution::Fixed(5);
  o.output_len = LengthDistribution::Fixed(3);
  o.shared_prefix_len = 20;
  o.shared_prefixes = 3;
  auto w = Workload::Create(o, {/*vocab_size=*/1000, /*context_length=*/64, false}, CountWords);
  ASSERT_TRUE(w.ok()) << w.status();
  std::map<std::vector<int32_t>, int> prefixes;
  for (int i = 0; i < 300; ++i) {
    const RequestSpec s = (*w)->Next();
    ASSERT_EQ(s.prompt_len, 25);
    const std::vector<int32_t> ids = Ids(s);
    ASSERT_EQ(ids.size(), 25u);
    ++prefixes[std::vector<int32_t>(ids.begin(), ids.begin() + 20)];
  }
  EXPECT_EQ(prefixes.size(), 3u);
  for (const auto& [p, n] : prefixes) EXPECT_GT(n, 50) << "chosen at random, about 100 each";
  o.shared_prefix_len = 60;  // 60 + 5 + 3 does not fit 64
  EXPECT_FALSE(Workload::Create(o, {1000, 64, false}, CountWords).ok());
}

TEST(WorkloadTest, ConversationTurnsResendTheirHistory) {
  WorkloadOptions o;
  o.input_len = LengthDistribution::Fixed(4);
  o.output_len = LengthDistribution::Fixed(3);
  o.turns = 3;
  o.conversations = 2;
  auto w = Workload::Create(o, {1000, 256, false}, CountWords);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<RequestSpec> s;
  for (int i = 0; i < 8; ++i) s.push_back((*w)->Next());
  // Round-robin over two conversations: requests 0, 2, 4 are turns 1-3 of the first; 6 starts anew.
  const std::vector<int32_t> turns = {1, 1, 2, 2, 3, 3, 1, 1};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(s[i].turn, turns[i]) << i;
  for (int c = 0; c < 2; ++c) {
    const std::vector<int32_t> t1 = Ids(s[c]), t2 = Ids(s[c + 2]), t3 = Ids(s[c + 4]);
    ASSERT_EQ(t1.size(), 4u);
    ASSERT_EQ(t2.size(), 4u + 3u + 4u) << "turn 1, an answer of the output length, 4 new tokens";
    ASSERT_EQ(t3.size(), t2.size() + 7u);
    EXPECT_TRUE(std::equal(t1.begin(), t1.end(), t2.begin()));
    EXPECT_TRUE(std::equal(t2.begin(), t2.end(), t3.begin()));
    EXPECT_EQ(Ids(s[c + 6]).size(), 4u) << "a new conversation";
  }
}

}  // namespace
}  // namespace llm::loadtest
