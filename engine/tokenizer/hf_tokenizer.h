// The tokenizer.json pipeline: added tokens -> normalizer -> pre-tokenizer -> BPE model ->
// post-processor for Encode; ids -> token strings -> decoder for Decode.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/tokenizer/added_vocabulary.h"
#include "engine/tokenizer/bpe_model.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/json_util.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/post_processor.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/tokenizer_json.h"

namespace llm::tokenizer_internal {

class HfTokenizer : public Tokenizer {
 public:
  // `config` is tokenizer_config.json, or null when there is none.
  static absl::StatusOr<std::unique_ptr<HfTokenizer>> Create(TokenizerJson tokenizer, const Json& config);

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> TokenToId(std::string_view token) const override;
  bool IsSpecial(int32_t id) const override;
  std::optional<int32_t> bos_token_id() const override { return bos_token_id_; }
  std::vector<int32_t> eos_token_ids() const override { return eos_token_ids_; }
  std::optional<size_t> max_bytes_per_token() const override { return max_bytes_per_token_; }

 private:
  HfTokenizer() = default;
  absl::Status LoadConfig(const Json& config);
  // Tokenizer::max_bytes_per_token() of this pipeline (computed once, at load).
  std::optional<size_t> BoundBytesPerToken() const;
  // Text between raw added tokens: normalize, split out normalized added tokens, pre-tokenize the
  // rest and run the model on each piece.
  absl::Status EncodeSegment(std::string_view segment, bool at_origin, std::vector<int32_t>* ids) const;

  AddedVocabulary added_;
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_token_id_;
  std::vector<int32_t> eos_token_ids_;
  std::optional<size_t> max_bytes_per_token_;
};

}  // namespace llm::tokenizer_internal
