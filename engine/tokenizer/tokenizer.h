// Tokenizer: Hugging Face tokenizer.json BPE models, natively in C++: byte-level (Llama-3, Qwen)
// and SentencePiece-style with byte fallback (Llama-2, Mistral), with the normalizers,
// pre-tokenizers, post-processors and decoders those files use, and added/special tokens.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace llm {

class Tokenizer {
 public:
  // `path` is a tokenizer.json file or a directory holding one. tokenizer_config.json beside it,
  // when present, supplies bos/eos tokens.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::filesystem::path& path);
  // From the text of a tokenizer.json (and optionally of tokenizer_config.json).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                            std::string_view tokenizer_config_json = {});
  virtual ~Tokenizer() = default;

  // `add_special_tokens` applies the post-processor (e.g. a leading <s> / <|begin_of_text|>).
  // Text that is not valid UTF-8 is InvalidArgument.
  virtual absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text,
                                                      bool add_special_tokens) const = 0;
  // Ids outside [0, vocab_size()) are InvalidArgument. Bytes that do not form valid UTF-8 become
  // U+FFFD, as the reference library does.
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids,
                                             bool skip_special_tokens) const = 0;

  virtual int32_t vocab_size() const = 0;  // including added tokens: max id + 1
  virtual std::optional<int32_t> TokenToId(std::string_view token) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  virtual std::optional<int32_t> bos_token_id() const = 0;
  virtual std::vector<int32_t> eos_token_ids() const = 0;
  // At most how many bytes of text one token stands for, when the pipeline bounds it; nullopt when
  // not (a normalizer or pre-tokenizer that can drop any amount of text, unknown characters fused
  // or dropped). Text of N bytes then encodes to at least N / max_bytes_per_token() tokens
  // (special tokens only add), so a server can refuse text that cannot fit the context at once,
  // without tokenizing it.
  virtual std::optional<size_t> max_bytes_per_token() const { return std::nullopt; }
};

// Streaming detokenization: feed ids one at a time, get back only text that is complete, so a
// client never receives a broken UTF-8 sequence. The concatenation of every Append() and the
// final Finish() equals Decode(all ids).
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);
  // The prompt's ids give context (e.g. SentencePiece's leading-space strip) but produce no text.
  void SetPrefix(absl::Span<const int32_t> prompt_ids);
  absl::StatusOr<std::string> Append(int32_t id);
  // Whatever is held back (an incomplete sequence at the end becomes U+FFFD).
  absl::StatusOr<std::string> Finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids_[prefix_offset_..read_offset_) decode to already-emitted text
  size_t read_offset_ = 0;
};

}  // namespace llm
