// Error paths and loading, plus behaviors of the BPE model and added tokens on tiny hand-written
// tokenizers, where the expected ids can be worked out by hand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/tokenizer/tokenizer.h"
#include "tests/tokenizer/tokenizer_test_util.h"

namespace llm {
namespace {

using Json = nlohmann::json;

// A minimal BPE tokenizer over a, b, c with merges; tests edit the parts they exercise.
Json TinyTokenizer() {
  return Json::parse(R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 0, "content": "<unk>", "special": true, "lstrip": false, "rstrip": false,
       "single_word": false, "normalized": false}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "WhitespaceSplit"},
    "post_processor": null,
    "decoder": null,
    "model": {
      "type": "BPE", "unk_token": "<unk>", "fuse_unk": false, "byte_fallback": false,
      "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "bc": 5, "abc": 6, "aa": 7},
      "merges": ["b c", "a b", "a bc", "a a"]
    }
  })");
}

std::unique_ptr<Tokenizer> Make(const Json& json) {
  auto tokenizer = Tokenizer::FromJson(json.dump());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

std::vector<int32_t> Ids(const Tokenizer& tokenizer, const std::string& text) {
  auto ids = tokenizer.Encode(text, false);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>{-1};
}

void ExpectError(const Json& json, absl::StatusCode code, const std::string& mention) {
  const auto tokenizer = Tokenizer::FromJson(json.dump());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), code) << tokenizer.status();
  EXPECT_NE(tokenizer.status().message().find(mention), std::string::npos) << tokenizer.status();
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  Json json = TinyTokenizer();
  json["model"]["type"] = "WordPiece";
  ExpectError(json, absl::StatusCode::kUnimplemented, "WordPiece");

  json = TinyTokenizer();
  json["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  ExpectError(json, absl::StatusCode::kUnimplemented, "Precompiled");

  json = TinyTokenizer();
  json["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  ExpectError(json, absl::StatusCode::kUnimplemented, "BertPreTokenizer");

  json = TinyTokenizer();
  json["decoder"] = {{"type", "CTC"}};
  ExpectError(json, absl::StatusCode::kUnimplemented, "CTC");

  json = TinyTokenizer();
  json["post_processor"] = {{"type", "Mystery"}};
  ExpectError(json, absl::StatusCode::kUnimplemented, "Mystery");
}

TEST(TokenizerErrors, MalformedFiles) {
  EXPECT_EQ(Tokenizer::FromJson("{\"model\": ").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromJson("[1, 2]").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromJson("{}").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromJson(TinyTokenizer().dump(), "not json").status().code(),
            absl::StatusCode::kInvalidArgument);

  Json json = TinyTokenizer();
  json["model"]["merges"] = {"a x"};
  ExpectError(json, absl::StatusCode::kInvalidArgument, "\"x\"");
  json["model"]["merges"] = {"a b c"};
  ExpectError(json, absl::StatusCode::kInvalidArgument, "merge");
  json = TinyTokenizer();
  json["model"]["vocab"]["a"] = "one";
  ExpectError(json, absl::StatusCode::kInvalidArgument, "vocab");
  json = TinyTokenizer();
  json["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  ExpectError(json, absl::StatusCode::kInvalidArgument, "(unclosed");
}

TEST(TokenizerErrors, ConfigNamingUnknownToken) {
  const auto tokenizer = Tokenizer::FromJson(TinyTokenizer().dump(), R"({"bos_token": "<nope>"})");
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenizerErrors, InvalidUtf8Input) {
  const Tokenizer& llama3 = testing::ReferenceTokenizer("llama3");
  for (const std::string bad : {"abc\xFF", "\xC3", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "ok\xC0\xAF"}) {
    const auto ids = llama3.Encode(bad, false);
    EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(TokenizerErrors, OutOfRangeIds) {
  const Tokenizer& llama2 = testing::ReferenceTokenizer("llama2");
  const std::vector<int32_t> too_big = {1, 32000};
  const std::vector<int32_t> negative = {-1};
  EXPECT_EQ(llama2.Decode(too_big, false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(llama2.Decode(negative, true).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenizerLoad, DirectoryWithConfig) {
  const auto dir = std::filesystem::temp_directory_path() / ("llm_tokenizer_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(testing::TokenizerJsonPath("llama2"), dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(testing::TokenizerConfigPath("llama2"), dir / "tokenizer_config.json",
                             std::filesystem::copy_options::overwrite_existing);
  for (const auto& path : {dir, dir / "tokenizer.json"}) {
    const auto tokenizer = Tokenizer::Load(path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    EXPECT_EQ((*tokenizer)->bos_token_id(), 1);
    EXPECT_EQ(*(*tokenizer)->Encode("Hello", true), (std::vector<int32_t>{1, 22557}));
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(Tokenizer::Load(dir).status().code(), absl::StatusCode::kNotFound);
}

TEST(TinyBpe, MergesByRankThenLeftmost) {
  const auto tokenizer = Make(TinyTokenizer());
  ASSERT_NE(tokenizer, nullptr);
  // "b c" outranks "a b": abc = a + bc -> abc.
  EXPECT_EQ(Ids(*tokenizer, "abc"), (std::vector<int32_t>{6}));
  // Ties go to the leftmost pair.
  EXPECT_EQ(Ids(*tokenizer, "aaa"), (std::vector<int32_t>{7, 1}));
  EXPECT_EQ(Ids(*tokenizer, "ab ca"), (std::vector<int32_t>{4, 3, 1}));

  Json json = TinyTokenizer();
  json["model"]["merges"] = Json::parse(R"([["a", "b"], ["b", "c"]])");  // array form, other ranks
  const auto reranked = Make(json);
  ASSERT_NE(reranked, nullptr);
  EXPECT_EQ(Ids(*reranked, "abc"), (std::vector<int32_t>{4, 3}));
}

TEST(TinyBpe, UnknownCharacters) {
  Json json = TinyTokenizer();
  const auto plain = Make(json);
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(Ids(*plain, "axyb"), (std::vector<int32_t>{1, 0, 0, 2}));
  json["model"]["fuse_unk"] = true;
  const auto fused = Make(json);
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(Ids(*fused, "axyb"), (std::vector<int32_t>{1, 0, 2}));
}

TEST(TinyBpe, IgnoreMergesTakesWholeWords) {
  Json json = TinyTokenizer();
  json["model"]["vocab"]["ca"] = 8;  // reachable only as a whole word: no merge makes it
  const auto merging = Make(json);
  ASSERT_NE(merging, nullptr);
  EXPECT_EQ(Ids(*merging, "ca"), (std::vector<int32_t>{3, 1}));
  json["model"]["ignore_merges"] = true;
  const auto whole = Make(json);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(Ids(*whole, "ca"), (std::vector<int32_t>{8}));
}

TEST(TinyBpe, AddedTokenStripping) {
  Json json = TinyTokenizer();
  json["added_tokens"].push_back(Json::parse(R"({"id": 9, "content": "<m>", "special": false, "lstrip": true,
      "rstrip": true, "single_word": false, "normalized": false})"));
  json["added_tokens"].push_back(Json::parse(R"({"id": 10, "content": "ab", "special": false, "lstrip": false,
      "rstrip": false, "single_word": true, "normalized": true})"));
  json["model"]["vocab"]["x"] = 11;
  json["decoder"] = Json::parse(R"({"type": "Fuse"})");
  const auto tokenizer = Make(json);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), 12);
  // lstrip/rstrip swallow the spaces around <m>; "ab" matches only as a whole word.
  EXPECT_EQ(Ids(*tokenizer, "c  <m>  c"), (std::vector<int32_t>{3, 9, 3}));
  EXPECT_EQ(Ids(*tokenizer, "x ab"), (std::vector<int32_t>{11, 10}));
  EXPECT_EQ(Ids(*tokenizer, "xab"), (std::vector<int32_t>{11, 4}));
  EXPECT_EQ(*tokenizer->Decode(std::vector<int32_t>{3, 9, 3}, false), "c<m>c");
}

TEST(TinyBpe, MetaspaceAndSentencePieceDecoding) {
  Json json = TinyTokenizer();
  json["pre_tokenizer"] =
      Json::parse(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true})");
  json["decoder"] =
      Json::parse(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true})");
  json["model"]["vocab"]["▁"] = 12;
  json["model"]["vocab"]["▁a"] = 13;
  json["model"]["merges"].push_back("▁ a");
  json["added_tokens"].push_back(Json::parse(R"({"id": 14, "content": "<m>", "special": true, "lstrip": false,
      "rstrip": false, "single_word": false, "normalized": false})"));
  const auto tokenizer = Make(json);
  ASSERT_NE(tokenizer, nullptr);
  // Only the text at the very start gets the prepended "▁".
  EXPECT_EQ(Ids(*tokenizer, "a b"), (std::vector<int32_t>{13, 12, 2}));
  EXPECT_EQ(Ids(*tokenizer, "<m>a b"), (std::vector<int32_t>{14, 1, 12, 2}));
  EXPECT_EQ(*tokenizer->Decode(std::vector<int32_t>{13, 12, 2}, false), "a b");
}

TEST(TinyBpe, DigitsAndSequence) {
  Json json = TinyTokenizer();
  json["pre_tokenizer"] = Json::parse(R"({"type": "Sequence", "pretokenizers": [
      {"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": true}]})");
  json["model"]["vocab"]["1"] = 15;
  json["model"]["vocab"]["2"] = 16;
  json["model"]["vocab"]["12"] = 17;
  json["model"]["merges"].push_back("1 2");
  const auto tokenizer = Make(json);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(Ids(*tokenizer, "a12"), (std::vector<int32_t>{1, 15, 16}));
}

TEST(TinyBpe, TemplateProcessing) {
  Json json = TinyTokenizer();
  json["post_processor"] = Json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<unk>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "<unk>", "type_id": 0}}],
      "pair": [], "special_tokens": {"<unk>": {"id": "<unk>", "ids": [0], "tokens": ["<unk>"]}}})");
  const auto tokenizer = Make(json);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(*tokenizer->Encode("ab", true), (std::vector<int32_t>{0, 4, 0}));
  EXPECT_EQ(*tokenizer->Encode("ab", false), (std::vector<int32_t>{4}));
  EXPECT_EQ(*tokenizer->Encode("", true), (std::vector<int32_t>{0, 0}));
}

}  // namespace
}  // namespace llm
