// chat_template_bench: render time of a long multi-turn conversation with tools through the
// published Qwen3 template (tools, tool calls, tool results, thinking) and the Llama-3.3 tool
// template. The templates are parsed once; each iteration renders the whole prompt. Prints one
// JSON line per template: median and p90 microseconds per render, the prompt's size, and a data
// check (the rendered text's length is the same every time).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/chat/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

using Json = nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 40 turns: user questions, assistant tool calls, tool results and answers, four tools.
llm::ChatRequest LongConversation() {
  llm::ChatRequest r;
  Json tools = Json::array();
  for (const char* name : {"get_weather", "search", "calculator", "calendar"}) {
    tools.push_back({{"type", "function"},
                     {"function", {{"name", name}, {"description", std::string("Tool ") + name + " for the benchmark"},
                                   {"parameters", {{"type", "object"},
                                                   {"properties", {{"query", {{"type", "string"}}}, {"n", {{"type", "integer"}}}}},
                                                   {"required", {"query"}}}}}}});
  }
  r.tools = tools;
  r.messages.push_back({{"role", "system"}, {"content", "You are a helpful assistant that uses tools."}});
  for (int turn = 0; turn < 10; ++turn) {
    const std::string n = std::to_string(turn);
    r.messages.push_back({{"role", "user"}, {"content", "Question " + n + ": what is the weather and the news today? " +
                                                            std::string(200, 'q')}});
    r.messages.push_back({{"role", "assistant"}, {"content", ""},
                          {"tool_calls", {{{"id", "c" + n}, {"type", "function"},
                                           {"function", {{"name", "get_weather"}, {"arguments", "{\"query\": \"Paris\", \"n\": 3}"}}}}}}});
    r.messages.push_back({{"role", "tool"}, {"tool_call_id", "c" + n}, {"content", "{\"temperature\": 21, \"sky\": \"clear\"}"}});
    r.messages.push_back({{"role", "assistant"}, {"content", "<think>\nThe tool says 21.\n</think>\n\nIt is 21 degrees and clear. " +
                                                                 std::string(300, 'a')}});
  }
  r.add_generation_prompt = true;
  r.kwargs = {{"date_string", "26 Jul 2024"}};
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string data = argc > 1 ? argv[1] : std::string(LLM_TEST_DATA_DIR) + "/chat/templates";
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 2000;
  const llm::ChatRequest request = LongConversation();
  for (const char* file : {"qwen3-fixture.jinja", "meta-llama-Llama-3.3-70B-Instruct.jinja"}) {
    auto chat = llm::ChatTemplate::Create({{"default", ReadFile(data + "/" + file)}},
                                          Json{{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}});
    if (!chat.ok()) {
      std::fprintf(stderr, "%s: %s\n", file, std::string(chat.status().message()).c_str());
      return 1;
    }
    std::vector<double> us;
    size_t length = 0;
    bool consistent = true;
    for (int i = 0; i < iterations + 50; ++i) {
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::string> text = (*chat)->Render(request);
      const double elapsed = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count();
      if (!text.ok()) {
        std::fprintf(stderr, "%s: %s\n", file, std::string(text.status().message()).c_str());
        return 1;
      }
      if (i == 0) length = text->size();
      consistent &= text->size() == length;
      if (i >= 50) us.push_back(elapsed);  // the first renders warm caches
    }
    std::sort(us.begin(), us.end());
    std::printf("{\"template\": \"%s\", \"messages\": %zu, \"tools\": %zu, \"prompt_bytes\": %zu, "
                "\"median_us\": %.1f, \"p90_us\": %.1f, \"iterations\": %d, \"data_check\": \"%s\"}\n",
                file, request.messages.size(), request.tools.size(), length, us[us.size() / 2],
                us[us.size() * 9 / 10], iterations, consistent ? "ok" : "FAILED");
    if (!consistent) return 1;
  }
  return 0;
}
