#include "engine/model/shard_index.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "engine/model/json_reader.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::string>> ParseShardIndex(std::string_view json_text,
                                                                   std::string_view source) {
  ASSIGN_OR_RETURN(nlohmann::json doc, ParseJsonText(json_text, source));
  ASSIGN_OR_RETURN(JsonObjectReader top, JsonObjectReader::Create(doc, std::string(source)));
  ASSIGN_OR_RETURN(std::optional<JsonObjectReader> weight_map, top.OptionalObject("weight_map"));
  if (!weight_map) return top.KeyError("weight_map", "is missing (required)");

  const auto& entries = weight_map->value().get_ref<const nlohmann::json::object_t&>();
  if (entries.empty()) return top.KeyError("weight_map", "is empty");
  std::map<std::string, std::string> shards;
  for (const auto& [tensor, shard] : entries) {
    if (!shard.is_string() || !IsPlainFileName(shard.get_ref<const std::string&>())) {
      return weight_map->KeyError(tensor, absl::StrCat("must name a shard file in the checkpoint directory, got ",
                                                       DescribeJson(shard)));
    }
    shards.emplace(tensor, shard.get_ref<const std::string&>());
  }
  return shards;
}

}  // namespace llm
