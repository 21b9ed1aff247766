// The Chat RPC end to end: a conversation rendered with the server's chat template streams the
// same tokens as Generate on the ids the template gives (rendered and encoded here with the same
// ChatTemplate and tokenizer), and bad conversations or templates are INVALID_ARGUMENT or
// FAILED_PRECONDITION with a message.
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "engine/chat/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/server/server_process.h"

namespace llm {
namespace {

using testing::ServerProcess;

constexpr char kTemplate[] =
    "{{ bos_token }}{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}"
    "{{ m.role }}: {{ m.content }}{% for c in m.tool_calls or [] %}[{{ c.name or c.function.name }}]{% endfor %}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";

std::string TemplateFile() {
  const std::string path = ::testing::TempDir() + "/chat_test_template_" + std::to_string(getpid()) + ".jinja";
  std::ofstream(path) << kTemplate;
  return path;
}

v1::ChatRequest Conversation() {
  v1::ChatRequest r;
  auto* system = r.add_messages();
  system->set_role("system");
  system->set_content("Be brief.");
  auto* user = r.add_messages();
  user->set_role("user");
  user->set_content("Hello there");
  r.mutable_options()->mutable_sampling()->set_temperature(0);
  r.mutable_options()->mutable_stopping()->set_max_tokens(8);
  r.mutable_options()->mutable_stopping()->set_ignore_eos(true);
  return r;
}

testing::CallResult ChatStream(v1::Llm::Stub& stub, const v1::ChatRequest& request) {
  testing::CallResult result;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
  auto reader = stub.Chat(&context, request);
  v1::GenerateResponse part;
  while (reader->Read(&part)) {
    for (int32_t id : part.token_ids()) result.merged.add_token_ids(id);
    result.merged.set_text(result.merged.text() + part.text());
    if (part.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) result.merged.set_finish_reason(part.finish_reason());
    if (part.has_usage()) *result.merged.mutable_usage() = part.usage();
    result.parts.push_back(part);
  }
  result.status = reader->Finish();
  return result;
}

TEST(ChatRpcTest, ChatEqualsGenerateOnTheTemplatesIds) {
  auto server = ServerProcess::Start({"--model", testing::TokenizerModelDir(), "--chat-template", TemplateFile()});
  ASSERT_NE(server, nullptr);
  auto stub = server->NewStub();
  const v1::ChatRequest chat = Conversation();
  testing::CallResult got = ChatStream(*stub, chat);
  ASSERT_TRUE(got.status.ok()) << got.status.error_message() << "\n" << server->Log();
  EXPECT_EQ(got.merged.token_ids_size(), 8);
  EXPECT_EQ(got.merged.finish_reason(), v1::FINISH_REASON_LENGTH);

  // The same prompt, rendered and tokenized here, through Generate.
  auto tokenizer = Tokenizer::Load(testing::TokenizerModelDir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  auto chat_template = ChatTemplate::ForModel(testing::TokenizerModelDir(), TemplateFile());
  ASSERT_TRUE(chat_template.ok()) << chat_template.status();
  ChatRequest request;
  request.messages = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}])");
  request.add_generation_prompt = true;
  auto ids = (*chat_template)->RenderIds(request, **tokenizer);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(got.merged.usage().prompt_tokens(), static_cast<int32_t>(ids->size()));
  testing::CallResult want = testing::Stream(*stub, testing::GreedyIds(*ids, 8));
  ASSERT_TRUE(want.status.ok()) << want.status.error_message();
  EXPECT_EQ(testing::Ids(got.merged), testing::Ids(want.merged));
  EXPECT_EQ(got.merged.text(), want.merged.text());

  // Template errors and bad requests are INVALID_ARGUMENT with a message.
  v1::ChatRequest tool = Conversation();
  auto* m = tool.add_messages();
  m->set_role("tool");
  m->set_content("{}");
  testing::CallResult raised = ChatStream(*stub, tool);
  EXPECT_EQ(raised.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(raised.status.error_message().find("no tools here"), std::string::npos) << raised.status.error_message();
  v1::ChatRequest with_prompt = Conversation();
  with_prompt.mutable_options()->set_text("a prompt");
  EXPECT_EQ(ChatStream(*stub, with_prompt).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ChatRequest bad_tools = Conversation();
  bad_tools.set_tools_json("{not json");
  EXPECT_EQ(ChatStream(*stub, bad_tools).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::ChatRequest calls = Conversation();
  auto* assistant = calls.add_messages();
  assistant->set_role("assistant");
  auto* call = assistant->add_tool_calls();
  call->set_name("lookup");
  call->set_arguments_json("{\"q\": 1}");
  EXPECT_TRUE(ChatStream(*stub, calls).status.ok());
}

TEST(ChatRpcTest, ModelWithoutTemplateIsFailedPrecondition) {
  auto server = ServerProcess::Start({"--model", testing::TokenizerModelDir()});
  ASSERT_NE(server, nullptr);
  auto stub = server->NewStub();
  testing::CallResult got = ChatStream(*stub, Conversation());
  EXPECT_EQ(got.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << got.status.error_message();
}

}  // namespace
}  // namespace llm
