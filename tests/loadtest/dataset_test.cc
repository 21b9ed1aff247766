#include "server/loadtest/dataset.h"

#include "gtest/gtest.h"

namespace llm::loadtest {
namespace {

TEST(DatasetTest, ReadsEveryLineFormat) {
  const std::string jsonl = R"({"prompt": "hello", "output_len": 12}
{"prompt": "hi", "completion": "a reply"}

{"prompt_token_ids": [1, 2, 3], "max_tokens": 5}
{"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "q1"}, {"from": "gpt", "value": "a1"}, {"from": "human", "value": "q2"}, {"from": "gpt", "value": "a2"}]}
{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "v"}]}
{"conversations": [{"from": "human", "value": "no reply"}]}
{"prompt": "no length"}
)";
  const auto d = ParseDataset(jsonl);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->entries.size(), 5u);
  EXPECT_EQ(d->skipped, 2);
  EXPECT_EQ(d->entries[0].prompt, "hello");
  EXPECT_EQ(d->entries[0].output_len, 12);
  EXPECT_EQ(d->entries[1].reference_output, "a reply");
  EXPECT_EQ(d->entries[1].output_len, 0);
  EXPECT_EQ(d->entries[2].prompt_token_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d->entries[2].prompt_len, 3);
  EXPECT_EQ(d->entries[2].output_len, 5);
  EXPECT_EQ(d->entries[3].prompt, "q1");  // the first human turn and the reply after it
  EXPECT_EQ(d->entries[3].reference_output, "a1");
  EXPECT_EQ(d->entries[4].prompt, "u");
  EXPECT_EQ(d->entries[4].reference_output, "v");
}

TEST(DatasetTest, ReadsAJsonArray) {
  // The ShareGPT files people have are one JSON array.
  const auto d = ParseDataset(R"(  [{"id": "x", "conversations": [{"from": "human", "value": "q"},
                                     {"from": "gpt", "value": "a"}]},
                                   {"prompt": "p", "output_len": 3}])");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->entries.size(), 2u);
}

TEST(DatasetTest, RejectsBrokenOrEmptyFiles) {
  EXPECT_FALSE(ParseDataset("{\"prompt\": \"a\", \"output_len\": 3}\n{broken\n").ok());
  EXPECT_FALSE(ParseDataset("[{\"prompt\": 1}").ok());
  EXPECT_FALSE(ParseDataset("{\"nothing\": 1}\n").ok());
  EXPECT_FALSE(ParseDataset("").ok());
  EXPECT_FALSE(LoadDataset("/nonexistent/prompts.jsonl").ok());
}

}  // namespace
}  // namespace llm::loadtest
