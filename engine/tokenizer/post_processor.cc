#include "engine/tokenizer/post_processor.h"

#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"

namespace llm::tokenizer_internal {
namespace {

// Ids before and after the sequence: covers TemplateProcessing's single template (which has one
// "$A") and the fixed [CLS] A [SEP] of Bert and Roberta.
class WrapProcessor : public PostProcessor {
 public:
  WrapProcessor(std::vector<int32_t> before, std::vector<int32_t> after)
      : before_(std::move(before)), after_(std::move(after)) {}
  void Process(std::vector<int32_t>* ids) const override {
    ids->insert(ids->begin(), before_.begin(), before_.end());
    ids->insert(ids->end(), after_.begin(), after_.end());
  }

 private:
  std::vector<int32_t> before_;
  std::vector<int32_t> after_;
};

class NoOpProcessor : public PostProcessor {
 public:
  void Process(std::vector<int32_t>*) const override {}
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  void Process(std::vector<int32_t>* ids) const override {
    for (const auto& step : steps_) step->Process(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

// One template piece: the sequence itself ("A") or the name of a special token. Files store
// objects ({"SpecialToken": {"id": ...}} / {"Sequence": {"id": "A"}}); the string shorthand
// ("$A", "<s>", with an optional ":type_id") is accepted too.
struct TemplatePiece {
  bool is_sequence;
  std::string name;
};

absl::StatusOr<TemplatePiece> ParsePiece(const Json& piece) {
  if (piece.is_string()) {
    const std::string text = piece.get<std::string>();
    std::string name = text.substr(0, text.rfind(':'));
    if (!name.starts_with("$")) return TemplatePiece{false, std::move(name)};
    name = name.substr(1);
    return TemplatePiece{true, (name.empty() || name == "A" || name == "a" || name == "0") ? "A" : name};
  }
  if (piece.is_object() && piece.contains("Sequence")) {
    ASSIGN_OR_RETURN(std::string id, GetString(piece["Sequence"], "id"));
    return TemplatePiece{true, std::move(id)};
  }
  if (piece.is_object() && piece.contains("SpecialToken")) {
    ASSIGN_OR_RETURN(std::string id, GetString(piece["SpecialToken"], "id"));
    return TemplatePiece{false, std::move(id)};
  }
  return absl::InvalidArgumentError("TemplateProcessing: malformed template piece");
}

absl::StatusOr<std::unique_ptr<PostProcessor>> MakeTemplate(const Json& config) {
  absl::flat_hash_map<std::string, std::vector<int32_t>> special_ids;
  if (const auto it = config.find("special_tokens"); it != config.end() && it->is_object()) {
    for (const auto& [name, token] : it->items()) {
      ASSIGN_OR_RETURN(const Json* ids, GetArray(token, "ids"));
      std::vector<int32_t>& out = special_ids[name];
      for (const Json& id : *ids) {
        if (!id.is_number_integer()) return absl::InvalidArgumentError("TemplateProcessing: ids must be integers");
        out.push_back(id.get<int32_t>());
      }
    }
  }
  const auto single = config.find("single");
  if (single == config.end()) return absl::InvalidArgumentError("TemplateProcessing: no \"single\" template");
  std::vector<Json> pieces;
  if (single->is_string()) {
    // "$A:0 </s>:0" style: whitespace-separated pieces.
    std::string text = single->get<std::string>();
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t end = std::min(text.find(' ', pos), text.size());
      if (end > pos) pieces.emplace_back(text.substr(pos, end - pos));
      pos = end + 1;
    }
  } else if (single->is_array()) {
    pieces.assign(single->begin(), single->end());
  } else {
    return absl::InvalidArgumentError("TemplateProcessing: \"single\" must be a list");
  }
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (const Json& piece_json : pieces) {
    ASSIGN_OR_RETURN(const TemplatePiece piece, ParsePiece(piece_json));
    if (piece.is_sequence) {
      if (piece.name != "A" || seen_sequence) {
        return absl::InvalidArgumentError("TemplateProcessing: the single template must hold $A exactly once");
      }
      seen_sequence = true;
      continue;
    }
    const auto it = special_ids.find(piece.name);
    if (it == special_ids.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TemplateProcessing: special token \"", piece.name, "\" is not in special_tokens"));
    }
    std::vector<int32_t>& out = seen_sequence ? after : before;
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  if (!seen_sequence) return absl::InvalidArgumentError("TemplateProcessing: the single template has no $A");
  return std::make_unique<WrapProcessor>(std::move(before), std::move(after));
}

// Bert and Roberta: "cls": ["[CLS]", 101], "sep": ["[SEP]", 102].
absl::StatusOr<std::unique_ptr<PostProcessor>> MakeClsSep(const Json& config) {
  const auto token_id = [&](const char* key) -> absl::StatusOr<int32_t> {
    const auto it = config.find(key);
    if (it == config.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("post_processor field \"", key, "\" must be [token, id]"));
    }
    return (*it)[1].get<int32_t>();
  };
  ASSIGN_OR_RETURN(const int32_t cls, token_id("cls"));
  ASSIGN_OR_RETURN(const int32_t sep, token_id("sep"));
  return std::make_unique<WrapProcessor>(std::vector<int32_t>{cls}, std::vector<int32_t>{sep});
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostProcessor>> PostProcessorFromJson(const Json& config) {
  if (config.is_null()) return nullptr;
  ASSIGN_OR_RETURN(const std::string type, ComponentType(config, "post_processor"));
  if (type == "TemplateProcessing") return MakeTemplate(config);
  if (type == "ByteLevel") return std::make_unique<NoOpProcessor>();  // it only adjusts offsets
  if (type == "RobertaProcessing" || type == "BertProcessing") return MakeClsSep(config);
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, GetArray(config, "processors"));
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const Json& step : *list) {
      ASSIGN_OR_RETURN(std::unique_ptr<PostProcessor> processor, PostProcessorFromJson(step));
      if (processor != nullptr) steps.push_back(std::move(processor));
    }
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat("unsupported post_processor type \"", type, "\""));
}

}  // namespace llm::tokenizer_internal
