// Published chat templates (tests/data/chat/templates) rendered on many conversations must give
// exactly the text and token ids of the references (tests/data/chat/references.json, made by
// tests/data/chat/make_references.py with transformers' rendering and Hugging Face tokenizers),
// or a template error of the same class. Also: how ChatTemplate finds a model's template.
#include <unistd.h>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "engine/chat/chat_template.h"
#include "engine/chat/template_error.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llm {
namespace {

using Json = nlohmann::ordered_json;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const Tokenizer& TestTokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    auto loaded = Tokenizer::Load(std::string(LLM_TOKENIZER_DATA_DIR) + "/" + name + "-tokenizer.json");
    if (!loaded.ok()) {
      ADD_FAILURE() << loaded.status();
      std::abort();
    }
    slot = *std::move(loaded);
  }
  return *slot;
}

// A local time "YYYY-MM-DDTHH:MM:SS" as the system clock would read it then.
std::time_t LocalTime(const std::string& iso) {
  std::tm t{};
  EXPECT_EQ(std::sscanf(iso.c_str(), "%d-%d-%dT%d:%d:%d", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min,
                        &t.tm_sec),
            6)
      << iso;
  t.tm_year -= 1900;
  t.tm_mon -= 1;
  t.tm_isdst = -1;
  return std::mktime(&t);
}

TEST(ChatTemplateReferenceTest, PublishedTemplatesMatchTransformers) {
  const std::filesystem::path dir = std::filesystem::path(LLM_TEST_DATA_DIR) / "chat";
  const Json refs = Json::parse(ReadFile(dir / "references.json"));
  ASSERT_GE(refs["cases"].size(), 300u);
  // Templates that print today's date (strftime_now) were rendered at this instant.
  const std::time_t rendered_at = LocalTime(refs["strftime_now"].get<std::string>());
  std::map<std::string, std::unique_ptr<ChatTemplate>> templates;
  int texts = 0, errors = 0;
  for (const Json& c : refs["cases"]) {
    const std::string name = c["template"].get<std::string>();
    SCOPED_TRACE(name + " / " + c["conversation"].get<std::string>() +
                 (c["request"]["add_generation_prompt"].get<bool>() ? " / generation prompt" : ""));
    auto& chat = templates[name];
    if (!chat) {
      auto created = ChatTemplate::Create({{"default", ReadFile(dir / "templates" / c["template_file"].get<std::string>())}},
                                          c["special_tokens"]);
      ASSERT_TRUE(created.ok()) << created.status();
      chat = *std::move(created);
      chat->set_clock([rendered_at] { return rendered_at; });
    }
    absl::StatusOr<ChatRequest> request = ParseChatRequest(c["request"].dump());
    ASSERT_TRUE(request.ok()) << request.status();
    absl::StatusOr<std::string> text = chat->Render(*request);
    if (c.contains("error")) {
      ASSERT_FALSE(text.ok()) << "expected " << c["error"] << ", rendered " << *text;
      std::optional<chat::ErrorKind> kind = chat::ErrorKindOf(text.status());
      ASSERT_TRUE(kind.has_value()) << text.status();
      EXPECT_EQ(chat::ErrorClassName(*kind), c["error"].get<std::string>()) << text.status();
      ++errors;
      continue;
    }
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c["text"].get<std::string>());
    absl::StatusOr<std::vector<int32_t>> ids = chat->RenderIds(*request, TestTokenizer(c["tokenizer"]));
    ASSERT_TRUE(ids.ok()) << ids.status();
    EXPECT_EQ(*ids, c["ids"].get<std::vector<int32_t>>());
    ++texts;
  }
  std::printf("%d rendered cases and %d template errors equal to the references (%s)\n", texts, errors,
              refs["generator"].get<std::string>().c_str());
}

// A fresh folder per test, removed at the end.
class ModelDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("chat_model_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
            std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::string Render(const ChatTemplate& t, const std::string& request) {
    absl::StatusOr<ChatRequest> r = ParseChatRequest(request);
    EXPECT_TRUE(r.ok()) << r.status();
    absl::StatusOr<std::string> text = t.Render(*r);
    return text.ok() ? *text : "ERROR: " + std::string(text.status().message());
  }
  std::filesystem::path dir_;
};

TEST_F(ModelDirTest, TokenizerConfigStringAndSpecialTokens) {
  Write("tokenizer_config.json", R"({"bos_token": {"content": "<s>", "special": true}, "eos_token": "</s>",
      "pad_token": null, "chat_template": "{{ bos_token }}{{ pad_token is defined }}{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}"})");
  auto t = ChatTemplate::ForModel(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(**t, R"({"messages": [{"role": "user", "content": "hi"}]})"), "<s>Falsehi</s>");
}

TEST_F(ModelDirTest, NamedTemplatesPickToolUseWhenToolsAreGiven) {
  Write("tokenizer_config.json", R"({"chat_template": [{"name": "default", "template": "plain"},
      {"name": "tool_use", "template": "tools={{ tools|length }}"}]})");
  auto t = ChatTemplate::ForModel(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(**t, R"({"messages": []})"), "plain");
  EXPECT_EQ(Render(**t, R"({"messages": [], "tools": [{"type": "function"}]})"), "tools=1");
}

TEST_F(ModelDirTest, FilesBesideTheTokenizerAndTheOverride) {
  Write("tokenizer_config.json", R"({"chat_template": "from config"})");
  Write("chat_template.json", R"({"chat_template": "from chat_template.json"})");
  auto t = ChatTemplate::ForModel(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(**t, R"({"messages": []})"), "from chat_template.json");
  Write("chat_template.jinja", "from chat_template.jinja\n");
  t = ChatTemplate::ForModel(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(**t, R"({"messages": []})"), "from chat_template.jinja");
  Write("override.jinja", "override {{ add_generation_prompt }}");
  t = ChatTemplate::ForModel(dir_, dir_ / "override.jinja");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(**t, R"({"messages": [], "add_generation_prompt": true})"), "override True");
}

TEST_F(ModelDirTest, NoTemplateIsNotFound) {
  Write("tokenizer_config.json", R"({"bos_token": "<s>"})");
  EXPECT_EQ(ChatTemplate::ForModel(dir_).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelDirTest, OpenAiShapesAndKwargs) {
  Write("chat_template.jinja",
        "{% for m in messages %}{{ m.role }}:{{ m.content }}"
        "{% for c in m.tool_calls or [] %}[{{ c.function.name }} {{ c.function.arguments.city }}]{% endfor %}|"
        "{% endfor %}{{ extra }}");
  auto t = ChatTemplate::ForModel(dir_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(Render(**t, R"({"messages": [
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "1", "type": "function",
        "function": {"name": "w", "arguments": "{\"city\": \"Oslo\"}"}}]},
      {"role": "tool", "tool_call_id": "1", "content": "ok"}], "kwargs": {"extra": 7}})"),
            "user:a\nb|assistant:None[w Oslo]|tool:ok|7");
  EXPECT_NE(Render(**t, R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "w", "arguments": "{bad"}}]}]})")
                .find("ERROR"),
            std::string::npos);
  EXPECT_NE(Render(**t, R"({"messages": [], "kwargs": {"messages": []}})").find("ERROR"), std::string::npos);
}

// The rendered text carries the BOS itself: encoding must not add a second one.
TEST(ChatTemplateIdsTest, NoSecondBos) {
  auto t = ChatTemplate::Create({{"default", "{{ bos_token }}{{ messages[0].content }}"}},
                                Json{{"bos_token", "<|begin_of_text|>"}});
  ASSERT_TRUE(t.ok());
  auto request = ParseChatRequest(R"({"messages": [{"role": "user", "content": "Hello world"}]})");
  ASSERT_TRUE(request.ok());
  auto ids = (*t)->RenderIds(*request, TestTokenizer("llama3"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, (std::vector<int32_t>{128000, 9906, 1917}));
}

}  // namespace
}  // namespace llm
