#include "engine/tokenizer/bpe_model.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"
#include "kernels/core/status.h"

namespace llm::tokenizer_internal {
namespace {

absl::string_view AbslView(std::string_view s) { return absl::string_view(s.data(), s.size()); }

// A pair that may merge. The queue pops the lowest rank, then the leftmost position.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
};
struct CandidateAfter {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<BpeModel>> BpeModel::Create(const Json& config, BpeTables tables) {
  if (!config.is_object()) return absl::InvalidArgumentError("tokenizer.json: \"model\" must be an object");
  // Very old files leave the type out; merges identify BPE.
  std::string type = "BPE";
  if (config.contains("type")) {
    ASSIGN_OR_RETURN(type, ComponentType(config, "model"));
  }
  if (type != "BPE") {
    return absl::UnimplementedError(absl::StrCat("unsupported model type \"", type, "\" (only BPE is)"));
  }
  if (const auto it = config.find("dropout"); it != config.end() && it->is_number() && it->get<double>() > 0) {
    return absl::UnimplementedError("BPE dropout is a training feature and is not supported");
  }
  std::unique_ptr<BpeModel> model(new BpeModel());
  ASSIGN_OR_RETURN(model->continuing_subword_prefix_, GetStringOr(config, "continuing_subword_prefix", ""));
  ASSIGN_OR_RETURN(model->end_of_word_suffix_, GetStringOr(config, "end_of_word_suffix", ""));
  ASSIGN_OR_RETURN(model->fuse_unk_, GetBoolOr(config, "fuse_unk", false));
  ASSIGN_OR_RETURN(model->byte_fallback_, GetBoolOr(config, "byte_fallback", false));
  ASSIGN_OR_RETURN(model->ignore_merges_, GetBoolOr(config, "ignore_merges", false));
  if (const auto it = config.find("unk_token"); it != config.end() && !it->is_null()) {
    if (!it->is_string()) return absl::InvalidArgumentError("tokenizer.json: model.unk_token must be a string");
    model->unk_token_ = it->get<std::string>();
  }
  RETURN_IF_ERROR(model->LoadVocab(std::move(tables.vocab)));
  RETURN_IF_ERROR(model->LoadMerges(tables.merges));
  return model;
}

std::optional<size_t> BpeModel::MaxBytesPerId() const {
  if (unk_token_ && fuse_unk_) return std::nullopt;
  bool every_byte = unk_token_.has_value();
  if (!every_byte && byte_fallback_)
    every_byte = std::all_of(byte_fallback_ids_.begin(), byte_fallback_ids_.end(), [](int32_t id) { return id >= 0; });
  if (!every_byte) {
    // A byte-level vocabulary holds one symbol per byte (GPT-2's alphabet): nothing is unknown.
    every_byte = true;
    for (int b = 0; b < 256 && every_byte; ++b) {
      std::string symbol;
      const char byte = static_cast<char>(b);
      ByteLevelAlphabet::Get().Encode(std::string_view(&byte, 1), &symbol);
      every_byte = TokenToId(symbol).has_value();
    }
  }
  if (!every_byte) return std::nullopt;
  size_t longest = 4;
  for (const std::string& token : id_to_token_) longest = std::max(longest, token.size());
  return longest;
}

absl::Status BpeModel::LoadVocab(std::vector<std::pair<std::string, int64_t>> vocab) {
  vocab_.reserve(vocab.size());
  int32_t max_id = -1;
  for (auto& [token, id64] : vocab) {
    if (id64 < 0 || id64 >= INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: vocab id of \"", token, "\" is invalid"));
    }
    const int32_t id = static_cast<int32_t>(id64);
    max_id = std::max(max_id, id);
    vocab_.insert_or_assign(std::move(token), id);
  }
  id_to_token_.assign(max_id + 1, std::string());
  has_token_.assign(max_id + 1, false);
  for (const auto& [token, id] : vocab_) {
    id_to_token_[id] = token;
    has_token_[id] = true;
  }
  byte_fallback_ids_.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (const auto id = TokenToId(absl::StrFormat("<0x%02X>", b))) byte_fallback_ids_[b] = *id;
  }
  if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
    code_point_ids_.assign(0x10000, -1);
    for (const auto& [token, id] : vocab_) {
      size_t pos = 0;
      if (token.empty() || !IsValidUtf8(token)) continue;
      const char32_t cp = DecodeCodePoint(token, &pos);
      if (pos == token.size() && cp < 0x10000) code_point_ids_[cp] = id;
    }
  }
  return absl::OkStatus();
}

absl::Status BpeModel::LoadMerges(const MergeList& merges) {
  merges_.reserve(merges.size());
  const size_t prefix_length = continuing_subword_prefix_.size();
  std::string merged;
  for (size_t i = 0; i < merges.size(); ++i) {
    const int32_t rank = static_cast<int32_t>(i);
    const auto [left, right] = merges[i];
    const auto left_id = TokenToId(left);
    const auto right_id = TokenToId(right);
    if (!left_id || !right_id) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: merge #", rank + 1, " uses \"",
                                                     std::string(left_id ? right : left),
                                                     "\", which is not in the vocab"));
    }
    if (right.size() < prefix_length) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: merge #", rank + 1, " is malformed"));
    }
    merged.assign(left);
    merged.append(right.substr(prefix_length));
    const auto new_id = TokenToId(merged);
    if (!new_id) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer.json: the result \"", merged, "\" of merge #", rank + 1, " is not in the vocab"));
    }
    // A repeated pair keeps its last rank, as the reference's map insertion does.
    merges_[PairKey(*left_id, *right_id)] = Merge{rank, *new_id};
  }
  return absl::OkStatus();
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  const auto it = vocab_.find(AbslView(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

absl::Status BpeModel::Tokenize(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return absl::OkStatus();
  if (ignore_merges_) {
    if (const auto id = TokenToId(word)) {
      ids->push_back(*id);
      return absl::OkStatus();
    }
  }
  if (word.size() > kMaxCachedWordBytes) return MergeWord(word, ids);

  const absl::string_view key = AbslView(word);
  CacheShard& shard = cache_[absl::Hash<absl::string_view>()(key) % kCacheShards];
  {
    absl::MutexLock lock(&shard.mutex);
    if (const auto it = shard.words.find(key); it != shard.words.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return absl::OkStatus();
    }
  }
  const size_t first = ids->size();
  RETURN_IF_ERROR(MergeWord(word, ids));
  std::vector<int32_t> word_ids(ids->begin() + first, ids->end());
  absl::MutexLock lock(&shard.mutex);
  if (shard.words.size() >= kCacheShardCapacity) shard.words.clear();
  shard.words.emplace(std::string(word), std::move(word_ids));
  return absl::OkStatus();
}

void BpeModel::AddSymbol(std::vector<Symbol>* symbols, int32_t id, int32_t len) {
  const int32_t index = static_cast<int32_t>(symbols->size());
  if (!symbols->empty()) symbols->back().next = index;
  symbols->push_back({id, index - 1, -1, len});
}

absl::Status BpeModel::MergeWord(std::string_view word, std::vector<int32_t>* ids) const {
  std::vector<Symbol> symbols;
  RETURN_IF_ERROR(InitialSymbols(word, &symbols));
  ApplyMerges(&symbols);
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids->push_back(s.id);
  }
  return absl::OkStatus();
}

absl::Status BpeModel::InitialSymbols(std::string_view word, std::vector<Symbol>* symbols) const {
  symbols->reserve(word.size());
  // A run of unknown characters waiting to be emitted as one (fused) or several unk tokens.
  int32_t unk_id = -1;  // -1: no pending unknown run
  int32_t unk_len = 0;
  std::string symbol_text;
  size_t pos = 0;
  while (pos < word.size()) {
    const size_t begin = pos;
    const char32_t cp = DecodeCodePoint(word, &pos);
    const int32_t byte_len = static_cast<int32_t>(pos - begin);
    std::optional<int32_t> id;
    if (!code_point_ids_.empty() && cp < 0x10000) {
      if (code_point_ids_[cp] >= 0) id = code_point_ids_[cp];
      if (!id) symbol_text.assign(word.substr(begin, byte_len));
    } else {
      symbol_text.clear();
      if (begin != 0) symbol_text += continuing_subword_prefix_;
      symbol_text.append(word.substr(begin, byte_len));
      if (pos == word.size()) symbol_text += end_of_word_suffix_;
      id = TokenToId(symbol_text);
    }
    if (id) {
      if (unk_id >= 0) {
        AddSymbol(symbols, unk_id, unk_len);
        unk_id = -1;
      }
      AddSymbol(symbols, *id, byte_len);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes_known = true;
      for (unsigned char b : symbol_text) all_bytes_known = all_bytes_known && byte_fallback_ids_[b] >= 0;
      if (all_bytes_known) {
        // The reference does not flush a pending unk here; neither do we, to match it.
        for (unsigned char b : symbol_text) AddSymbol(symbols, byte_fallback_ids_[b], 1);
        continue;
      }
    }
    if (!unk_token_) continue;  // no unk token: the reference drops the character
    const auto unk_token_id = TokenToId(*unk_token_);
    if (!unk_token_id) {
      return absl::InvalidArgumentError(absl::StrCat("unk_token \"", *unk_token_, "\" is not in the vocab"));
    }
    if (unk_id >= 0 && fuse_unk_) {
      unk_len += byte_len;
    } else {
      if (unk_id >= 0) AddSymbol(symbols, unk_id, unk_len);
      unk_id = *unk_token_id;
      unk_len = byte_len;
    }
  }
  if (unk_id >= 0) AddSymbol(symbols, unk_id, unk_len);
  return absl::OkStatus();
}

void BpeModel::ApplyMerges(std::vector<Symbol>* symbols_ptr) const {
  std::vector<Symbol>& symbols = *symbols_ptr;
  // Merge the lowest-ranked adjacent pair first, leftmost on ties. Stale queue entries (whose
  // pair has since changed) are recognized by the pair no longer producing the same token.
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateAfter> queue;
  const auto find_merge = [&](int32_t left, int32_t right) -> const Merge* {
    const auto it = merges_.find(PairKey(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const Merge* m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next == -1) continue;
    const Symbol right = symbols[left.next];
    const Merge* current = find_merge(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;

    // The right symbol is absorbed; the new neighbors may now merge with the result.
    symbols[left.next].len = 0;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const Merge* m = find_merge(symbols[left.prev].id, left.id)) {
        queue.push({m->rank, left.prev, m->new_id});
      }
    }
    if (left.next >= 0) {
      if (const Merge* m = find_merge(left.id, symbols[left.next].id)) {
        queue.push({m->rank, top.pos, m->new_id});
      }
    }
  }
}

}  // namespace llm::tokenizer_internal
