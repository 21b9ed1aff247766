// Loading: tokenizer.json (and tokenizer_config.json) text -> HfTokenizer.
#include "engine/tokenizer/tokenizer.h"

#include <exception>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/hf_tokenizer.h"
#include "engine/tokenizer/json_util.h"
#include "engine/tokenizer/tokenizer_json.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

using tokenizer_internal::Json;

absl::StatusOr<Json> ParseJson(std::string_view text, std::string_view name) {
  Json json = Json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(name), " is not valid JSON"));
  }
  return json;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                               std::string_view tokenizer_config_json) {
  // The JSON library reports some misuse by exception; none may leave this module.
  try {
    ASSIGN_OR_RETURN(tokenizer_internal::TokenizerJson tokenizer,
                     tokenizer_internal::ParseTokenizerJson(tokenizer_json));
    Json config;
    if (!tokenizer_config_json.empty()) {
      ASSIGN_OR_RETURN(config, ParseJson(tokenizer_config_json, "tokenizer_config.json"));
    }
    ASSIGN_OR_RETURN(std::unique_ptr<tokenizer_internal::HfTokenizer> result,
                     tokenizer_internal::HfTokenizer::Create(std::move(tokenizer), config));
    return std::unique_ptr<Tokenizer>(std::move(result));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed tokenizer files: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::filesystem::path& path) {
  std::error_code error;
  const std::filesystem::path json_path =
      std::filesystem::is_directory(path, error) ? path / "tokenizer.json" : path;
  ASSIGN_OR_RETURN(const std::string tokenizer_json, tokenizer_internal::ReadFile(json_path.string()));
  const std::filesystem::path config_path = json_path.parent_path() / "tokenizer_config.json";
  std::string config_json;
  if (std::filesystem::exists(config_path, error)) {
    ASSIGN_OR_RETURN(config_json, tokenizer_internal::ReadFile(config_path.string()));
  }
  auto result = FromJson(tokenizer_json, config_json);
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat(json_path.string(), ": ", result.status().message()));
  }
  return result;
}

}  // namespace llm
