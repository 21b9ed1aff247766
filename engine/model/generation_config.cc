#include "engine/model/generation_config.h"

#include <cmath>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/model/json_reader.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

absl::StatusOr<std::optional<float>> ReadFloat(const JsonObjectReader& reader, std::string_view key) {
  ASSIGN_OR_RETURN(std::optional<double> value, reader.OptionalDouble(key));
  if (!value) return std::optional<float>();
  if (!std::isfinite(*value)) return reader.KeyError(key, "must be a finite number");
  return std::optional<float>(static_cast<float>(*value));
}

}  // namespace

std::string GenerationDefaults::ToString() const {
  std::vector<std::string> parts;
  if (temperature) parts.push_back(absl::StrCat("temperature=", *temperature));
  if (top_p) parts.push_back(absl::StrCat("top_p=", *top_p));
  if (top_k) parts.push_back(absl::StrCat("top_k=", *top_k));
  if (min_p) parts.push_back(absl::StrCat("min_p=", *min_p));
  if (repetition_penalty) parts.push_back(absl::StrCat("repetition_penalty=", *repetition_penalty));
  return parts.empty() ? "none" : absl::StrJoin(parts, " ");
}

absl::StatusOr<GenerationDefaults> ReadGenerationDefaults(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return GenerationDefaults();
  ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  ASSIGN_OR_RETURN(nlohmann::json json, ParseJsonText(text, path.string()));
  ASSIGN_OR_RETURN(JsonObjectReader reader, JsonObjectReader::Create(json, path.string()));
  GenerationDefaults d;
  ASSIGN_OR_RETURN(d.temperature, ReadFloat(reader, "temperature"));
  ASSIGN_OR_RETURN(d.top_p, ReadFloat(reader, "top_p"));
  ASSIGN_OR_RETURN(d.min_p, ReadFloat(reader, "min_p"));
  ASSIGN_OR_RETURN(d.repetition_penalty, ReadFloat(reader, "repetition_penalty"));
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k, reader.OptionalInt("top_k"));
  if (top_k) {
    // transformers and vLLM spell "no limit" as 0 or -1; the engine as 0.
    if (*top_k < -1 || *top_k > INT32_MAX) return reader.KeyError("top_k", "must be -1, 0 or a positive count");
    d.top_k = static_cast<int32_t>(std::max<int64_t>(*top_k, 0));
  }
  return d;
}

}  // namespace llm
