// llm tokenize: token ids of text, with a tokenizer.json (or a model folder holding one).
// --jsonl reads one JSON string per line and writes {"token_ids": [...]} per line, in order.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/cli/commands.h"
#include "server/cli/flags.h"

namespace llm::cli {
namespace {

int Fail(const std::string& message, int code) {
  std::fprintf(stderr, "llm tokenize: %s\n", message.c_str());
  return code;
}

}  // namespace

int RunTokenize(int argc, char** argv) {
  FlagSet flags("tokenize", "Prints the token ids of text as JSON ({\"token_ids\": [...]}).");
  std::string tokenizer_path, model, text, text_file, jsonl;
  bool add_special = false;
  flags.String("tokenizer", &tokenizer_path, "a tokenizer.json file or a model folder holding one");
  flags.String("model", &model, "a model folder (the same as --tokenizer FOLDER)");
  flags.String("text", &text, "text to encode");
  flags.String("text-file", &text_file, "file whose whole content is encoded");
  flags.String("jsonl", &jsonl, "file of JSON strings, one per line ('-' for stdin)");
  flags.Bool("add-special-tokens", &add_special, "apply the tokenizer's post-processor (e.g. BOS)");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  const int sources = flags.IsSet("text") + flags.IsSet("text-file") + flags.IsSet("jsonl");
  if (sources != 1) return Fail("give exactly one of --text, --text-file and --jsonl", 2);
  if (tokenizer_path.empty()) tokenizer_path = model;
  if (tokenizer_path.empty()) return Fail("--tokenizer (or --model) is required", 2);

  auto tokenizer = Tokenizer::Load(tokenizer_path);
  if (!tokenizer.ok()) return Fail(std::string(tokenizer.status().message()), 1);
  auto encode_line = [&](const std::string& input) -> int {
    auto ids = (*tokenizer)->Encode(input, add_special);
    if (!ids.ok()) return Fail(std::string(ids.status().message()), 2);
    std::printf("%s\n", nlohmann::json({{"token_ids", *ids}}).dump().c_str());
    return 0;
  };
  if (flags.IsSet("text")) return encode_line(text);
  if (flags.IsSet("text-file")) {
    std::ifstream in(text_file, std::ios::binary);
    if (!in) return Fail("cannot open '" + text_file + "'", 1);
    std::stringstream ss;
    ss << in.rdbuf();
    return encode_line(ss.str());
  }
  std::ifstream file;
  std::istream* in = &std::cin;
  if (jsonl != "-") {
    file.open(jsonl, std::ios::binary);
    if (!file) return Fail("cannot open '" + jsonl + "'", 1);
    in = &file;
  }
  std::string line;
  for (int64_t n = 1; std::getline(*in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!value.is_string())
      return Fail(jsonl + ":" + std::to_string(n) + ": each line must be one JSON string", 2);
    if (int rc = encode_line(value.get<std::string>()); rc != 0) return rc;
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace llm::cli
