// The BPE model: a vocabulary, ranked merges, and the word -> ids algorithm of the reference
// library (lowest-ranked adjacent pair first, leftmost on ties), with byte fallback, unknown-token
// fusing, ignore_merges and a cache of recent words.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "engine/tokenizer/json_util.h"
#include "engine/tokenizer/tokenizer_json.h"

namespace llm::tokenizer_internal {

class BpeModel {
 public:
  // The "model" object of tokenizer.json (its type must be "BPE"), with its vocab and merges
  // read out beforehand.
  static absl::StatusOr<std::unique_ptr<BpeModel>> Create(const Json& config, BpeTables tables);

  // Appends the ids of one pre-token (a "word").
  absl::Status Tokenize(std::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // Null for an id with no token.
  const std::string* IdToToken(int32_t id) const;
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }  // max id + 1
  // At most how many bytes of a pre-token one id stands for: the longest token's text (every
  // input byte is at least one byte of its token's text, whether byte-level symbol, "▁" or
  // itself), or 4 for an unknown character. Nullopt when a run of unknown characters fuses into one
  // id, or a character can be dropped (no unk token, no byte fallback for every byte, and not
  // every byte-level symbol in the vocabulary).
  std::optional<size_t> MaxBytesPerId() const;

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  // Words are cached by their text. Sharded so concurrent Encode calls rarely wait on each other;
  // a full shard is simply cleared, which keeps the hot words of the current traffic.
  struct CacheShard {
    absl::Mutex mutex;
    absl::flat_hash_map<std::string, std::vector<int32_t>> words;
  };
  static constexpr int kCacheShards = 16;
  static constexpr size_t kCacheShardCapacity = 8192;
  static constexpr size_t kMaxCachedWordBytes = 128;

  BpeModel() = default;
  absl::Status LoadVocab(std::vector<std::pair<std::string, int64_t>> vocab);
  absl::Status LoadMerges(const MergeList& merges);
  // One symbol of a word being merged: a doubly linked list threaded through a vector, as merged
  // symbols are absorbed by their left neighbor and marked dead with len 0.
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    int32_t len;  // bytes of the word it covers; 0 once merged away
  };

  // Splits `word` into initial symbols and applies the merges.
  absl::Status MergeWord(std::string_view word, std::vector<int32_t>* ids) const;
  // Characters (with the subword prefix / word suffix), byte-fallback bytes, unknown runs.
  absl::Status InitialSymbols(std::string_view word, std::vector<Symbol>* symbols) const;
  void ApplyMerges(std::vector<Symbol>* symbols) const;
  static void AddSymbol(std::vector<Symbol>* symbols, int32_t id, int32_t len);

  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  // Id of each single code point below U+10000 (-1 when absent), so that most initial symbols
  // skip the string hash. Empty when a subword prefix or word suffix changes the symbol text.
  std::vector<int32_t> code_point_ids_;
  std::optional<std::string> unk_token_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_fallback_ids_;  // id of "<0xAB>" per byte, -1 when absent
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace llm::tokenizer_internal
