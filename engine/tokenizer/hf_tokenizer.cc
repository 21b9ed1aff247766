#include "engine/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/core/status.h"

namespace llm::tokenizer_internal {
namespace {

const Json& Field(const Json& object, const char* key) {
  static const Json* const kNull = new Json();
  const auto it = object.find(key);
  return it == object.end() ? *kNull : *it;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Create(TokenizerJson parsed, const Json& config) {
  const Json& tokenizer = parsed.root;
  if (!tokenizer.is_object()) return absl::InvalidArgumentError("tokenizer.json must hold a JSON object");
  const Json& model = Field(tokenizer, "model");
  if (!model.is_object()) return absl::InvalidArgumentError("tokenizer.json: \"model\" must be an object");
  std::unique_ptr<HfTokenizer> result(new HfTokenizer());
  if (!parsed.bpe) {
    // Not taken out by the fast reader; reading from the DOM also validates.
    if (const auto type = model.find("type"); type != model.end() && *type != "BPE") {
      return absl::UnimplementedError(absl::StrCat("unsupported model type ", type->dump(), " (only BPE is)"));
    }
    ASSIGN_OR_RETURN(parsed.bpe, BpeTablesFromJson(model));
  }
  ASSIGN_OR_RETURN(result->model_, BpeModel::Create(model, *std::move(parsed.bpe)));
  ASSIGN_OR_RETURN(result->added_, AddedVocabulary::FromJson(Field(tokenizer, "added_tokens")));
  ASSIGN_OR_RETURN(result->normalizer_, NormalizerFromJson(Field(tokenizer, "normalizer")));
  ASSIGN_OR_RETURN(result->pre_tokenizer_, PreTokenizerFromJson(Field(tokenizer, "pre_tokenizer")));
  ASSIGN_OR_RETURN(result->post_processor_, PostProcessorFromJson(Field(tokenizer, "post_processor")));
  ASSIGN_OR_RETURN(result->decoder_, DecoderFromJson(Field(tokenizer, "decoder")));
  result->vocab_size_ = std::max(result->model_->vocab_size(), result->added_.max_id() + 1);
  if (!config.is_null()) RETURN_IF_ERROR(result->LoadConfig(config));
  result->max_bytes_per_token_ = result->BoundBytesPerToken();
  return result;
}

std::optional<size_t> HfTokenizer::BoundBytesPerToken() const {
  const std::optional<size_t> model = model_->MaxBytesPerId();
  const std::optional<size_t> added = added_.MaxBytesPerToken();
  const std::optional<double> shrink = normalizer_ ? normalizer_->MaxShrink() : std::optional<double>(1.0);
  if (!model || !added || !shrink || (pre_tokenizer_ && pre_tokenizer_->DropsText())) return std::nullopt;
  // The decoder's work is irrelevant here: the bound is on input bytes, through the normalizer.
  return static_cast<size_t>(std::ceil(static_cast<double>(std::max(*model, *added)) * *shrink));
}

absl::Status HfTokenizer::LoadConfig(const Json& config) {
  if (!config.is_object()) return absl::InvalidArgumentError("tokenizer_config.json must hold a JSON object");
  // A token is named by a string or by an AddedToken-like {"content": ...} object.
  const auto token_id = [&](const char* key) -> absl::StatusOr<std::optional<int32_t>> {
    const Json& value = Field(config, key);
    std::string content;
    if (value.is_null()) return std::optional<int32_t>();
    if (value.is_string()) {
      content = value.get<std::string>();
    } else if (value.is_object() && Field(value, "content").is_string()) {
      content = Field(value, "content").get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: malformed \"", key, "\""));
    }
    const std::optional<int32_t> id = TokenToId(content);
    if (!id) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer_config.json: ", key, " \"", content, "\" is not in the vocabulary"));
    }
    return id;
  };
  ASSIGN_OR_RETURN(bos_token_id_, token_id("bos_token"));
  ASSIGN_OR_RETURN(const std::optional<int32_t> eos, token_id("eos_token"));
  if (eos) eos_token_ids_ = {*eos};
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  if (!IsValidUtf8(text)) return absl::InvalidArgumentError("Encode: text is not valid UTF-8");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  for (const InputSplit& split : added_.raw_matcher().Split(text)) {
    if (split.token_id) {
      ids.push_back(*split.token_id);
      continue;
    }
    RETURN_IF_ERROR(EncodeSegment(text.substr(split.begin, split.end - split.begin), split.begin == 0, &ids));
  }
  if (add_special_tokens && post_processor_ != nullptr) post_processor_->Process(&ids);
  return ids;
}

absl::Status HfTokenizer::EncodeSegment(std::string_view segment, bool at_origin, std::vector<int32_t>* ids) const {
  std::string normalized(segment);
  if (normalizer_ != nullptr) RETURN_IF_ERROR(normalizer_->Normalize(&normalized));
  PreTokens pieces;
  for (const InputSplit& split : added_.normalized_matcher().Split(normalized)) {
    if (split.token_id) {
      ids->push_back(*split.token_id);
      continue;
    }
    pieces.clear();
    pieces.push_back({normalized.substr(split.begin, split.end - split.begin), at_origin && split.begin == 0});
    if (pre_tokenizer_ != nullptr) RETURN_IF_ERROR(pre_tokenizer_->PreTokenize(&pieces));
    for (const PreToken& piece : pieces) RETURN_IF_ERROR(model_->Tokenize(piece.text, ids));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HfTokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat("Decode: id ", id, " is outside [0, ", vocab_size_, ")"));
    }
    const AddedToken* added = added_.FindById(id);
    const std::string* token = added != nullptr ? &added->content : model_->IdToToken(id);
    if (token == nullptr) continue;  // a hole in the id space decodes to nothing
    if (skip_special_tokens) {
      // The reference skips by text: any token whose text is a special token's.
      const AddedToken* named = added != nullptr ? added : added_.FindByContent(*token);
      if (named != nullptr && named->special) continue;
    }
    tokens.push_back(*token);
  }
  if (decoder_ == nullptr) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) absl::StrAppend(&joined, i == 0 ? "" : " ", tokens[i]);
    return joined;
  }
  RETURN_IF_ERROR(decoder_->DecodeChain(&tokens));
  std::string text;
  for (const std::string& token : tokens) text += token;
  return text;
}

std::optional<int32_t> HfTokenizer::TokenToId(std::string_view token) const {
  if (const AddedToken* added = added_.FindByContent(token)) return added->id;
  return model_->TokenToId(token);
}

bool HfTokenizer::IsSpecial(int32_t id) const {
  const AddedToken* added = added_.FindById(id);
  return added != nullptr && added->special;
}

}  // namespace llm::tokenizer_internal
