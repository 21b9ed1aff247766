#include "server/loadtest/dataset.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace llm::loadtest {
namespace {

using nlohmann::json;

std::string StringField(const json& o, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (auto it = o.find(name); it != o.end() && it->is_string()) return it->get<std::string>();
  return "";
}

int64_t IntField(const json& o, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (auto it = o.find(name); it != o.end() && it->is_number_integer()) return it->get<int64_t>();
  return 0;
}

// A conversation as a list of turns: the first user turn and the assistant reply after it.
bool FromTurns(const json& turns, const char* speaker_key, const char* text_key, DatasetEntry* e) {
  if (!turns.is_array()) return false;
  for (size_t i = 0; i + 1 < turns.size(); ++i) {
    const json& t = turns[i];
    if (!t.is_object()) continue;
    const std::string who = StringField(t, {speaker_key});
    if (who != "human" && who != "user") continue;
    const json& reply = turns[i + 1];
    if (!reply.is_object()) return false;
    e->prompt = StringField(t, {text_key});
    e->reference_output = StringField(reply, {text_key});
    return !e->prompt.empty() && !e->reference_output.empty();
  }
  return false;
}

// One object of the file; false when it holds no usable request.
bool ToEntry(const json& o, DatasetEntry* e) {
  if (!o.is_object()) return false;
  if (auto it = o.find("conversations"); it != o.end()) return FromTurns(*it, "from", "value", e);
  if (auto it = o.find("messages"); it != o.end()) return FromTurns(*it, "role", "content", e);
  if (auto it = o.find("prompt_token_ids"); it != o.end() && it->is_array()) {
    for (const json& id : *it) {
      if (!id.is_number_integer()) return false;
      e->prompt_token_ids.push_back(id.get<int32_t>());
    }
    e->prompt_len = static_cast<int64_t>(e->prompt_token_ids.size());
  } else {
    e->prompt = StringField(o, {"prompt", "input", "text"});
    e->prompt_len = IntField(o, {"prompt_len", "input_len"});
  }
  e->output_len = IntField(o, {"output_len", "max_tokens", "output_tokens"});
  e->reference_output = StringField(o, {"completion", "output", "response"});
  if (e->prompt.empty() && e->prompt_token_ids.empty()) return false;
  return e->output_len > 0 || !e->reference_output.empty();
}

void Add(const json& o, Dataset* d) {
  DatasetEntry e;
  if (ToEntry(o, &e))
    d->entries.push_back(std::move(e));
  else
    ++d->skipped;
}

}  // namespace

absl::StatusOr<Dataset> ParseDataset(const std::string& contents) {
  Dataset d;
  const size_t first = contents.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && contents[first] == '[') {
    const json all = json::parse(contents, nullptr, /*allow_exceptions=*/false);
    if (all.is_discarded()) return absl::InvalidArgumentError("the dataset is not valid JSON");
    for (const json& o : all) Add(o, &d);
  } else {
    std::istringstream in(contents);
    std::string line;
    for (int line_no = 1; std::getline(in, line); ++line_no) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const json o = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (o.is_discarded())
        return absl::InvalidArgumentError(absl::StrCat("dataset line ", line_no, " is not valid JSON"));
      Add(o, &d);
    }
  }
  if (d.entries.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("the dataset has no usable request (", d.skipped, " skipped)"));
  return d;
}

absl::StatusOr<Dataset> LoadDataset(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open dataset '", path, "'"));
  std::string contents((std::istreambuf_iterator<char>(in)), {});
  auto d = ParseDataset(contents);
  if (!d.ok()) return absl::Status(d.status().code(), absl::StrCat(path, ": ", d.status().message()));
  return d;
}

}  // namespace llm::loadtest
