#include "engine/tokenizer/tokenizer_json.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace llm::tokenizer_internal {
namespace {

// SAX handler: builds a DOM, except that the values of root.model.vocab and root.model.merges go
// to BpeTables (and become null in the DOM). Anything unexpected inside those two makes it give
// up (`unusual` set), and the caller falls back to a plain DOM parse.
class Reader : public nlohmann::json_sax<Json> {
 public:
  Json root;
  BpeTables tables;
  bool saw_vocab = false;
  bool saw_merges = false;
  bool unusual = false;

  bool null() override { return Value(Json()); }
  bool boolean(bool b) override { return Value(Json(b)); }
  bool number_integer(number_integer_t n) override {
    if (mode_ == Mode::kVocab) return VocabId(n);
    return Value(Json(n));
  }
  bool number_unsigned(number_unsigned_t n) override {
    if (mode_ == Mode::kVocab) return n <= INT64_MAX ? VocabId(static_cast<int64_t>(n)) : GiveUp();
    return Value(Json(n));
  }
  bool number_float(number_float_t x, const string_t&) override { return Value(Json(x)); }
  bool binary(binary_t&) override { return GiveUp(); }

  bool string(string_t& s) override {
    switch (mode_) {
      case Mode::kDom:
        return Value(Json(std::move(s)));
      case Mode::kVocab:
        return GiveUp();
      case Mode::kMerges:
        return MergeLine(s);
      case Mode::kMergePair:
        if (pair_size_ >= 2) return GiveUp();
        pair_[pair_size_++] = std::move(s);
        return true;
    }
    return GiveUp();
  }

  bool key(string_t& k) override {
    if (mode_ == Mode::kVocab) {
      vocab_key_ = std::move(k);
      return true;
    }
    if (mode_ != Mode::kDom) return GiveUp();
    stack_.back().key = std::move(k);
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::kDom) return GiveUp();
    if (IsModelField("vocab")) {
      mode_ = Mode::kVocab;
      saw_vocab = true;
      return Value(Json());
    }
    return Open(Json::object());
  }
  bool end_object() override {
    if (mode_ == Mode::kVocab) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kMergePair;
      pair_size_ = 0;
      return true;
    }
    if (mode_ != Mode::kDom) return GiveUp();
    if (IsModelField("merges")) {
      mode_ = Mode::kMerges;
      saw_merges = true;
      return Value(Json());
    }
    return Open(Json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::kMergePair) {
      if (pair_size_ != 2) return GiveUp();
      tables.merges.Add(pair_[0], pair_[1]);
      mode_ = Mode::kMerges;
      return true;
    }
    if (mode_ == Mode::kMerges) {
      mode_ = Mode::kDom;
      return true;
    }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) override {
    error_position_ = position;
    return false;
  }
  std::optional<size_t> error_position() const { return error_position_; }

 private:
  enum class Mode { kDom, kVocab, kMerges, kMergePair };
  struct Frame {
    Json* container;
    std::string key;  // last key seen, when `container` is an object
  };

  bool GiveUp() {
    unusual = true;
    return false;
  }

  // Places a value in the current container (or makes it the root).
  Json* Place(Json value) {
    if (stack_.empty()) {
      root = std::move(value);
      return &root;
    }
    Frame& top = stack_.back();
    if (top.container->is_array()) {
      top.container->push_back(std::move(value));
      return &top.container->back();
    }
    Json& slot = (*top.container)[top.key];
    slot = std::move(value);
    return &slot;
  }
  bool Value(Json value) {
    Place(std::move(value));
    return true;
  }
  bool Open(Json container) {
    stack_.push_back({Place(std::move(container)), std::string()});
    return true;
  }
  // True when the value about to start is root["model"][field].
  bool IsModelField(const char* field) const {
    return stack_.size() == 2 && stack_[0].key == "model" && stack_[1].container->is_object() &&
           stack_[1].key == field;
  }
  bool VocabId(int64_t id) {
    tables.vocab.emplace_back(std::move(vocab_key_), id);
    return true;
  }
  bool MergeLine(const std::string& line) {
    if (line.starts_with("#version")) return true;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) return GiveUp();
    const std::string_view view(line);
    tables.merges.Add(view.substr(0, space), view.substr(space + 1));
    return true;
  }

  std::vector<Frame> stack_;  // the open DOM containers; pointers stay valid as only the top grows
  Mode mode_ = Mode::kDom;
  std::string vocab_key_;
  std::array<std::string, 2> pair_;
  int pair_size_ = 0;
  std::optional<size_t> error_position_;
};

}  // namespace

absl::StatusOr<TokenizerJson> ParseTokenizerJson(std::string_view text) {
  Reader reader;
  const bool ok = Json::sax_parse(text.begin(), text.end(), &reader);
  if (ok && reader.saw_vocab) return TokenizerJson{std::move(reader.root), std::move(reader.tables)};
  if (ok && !reader.saw_merges) return TokenizerJson{std::move(reader.root), std::nullopt};
  if (!ok && !reader.unusual) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.json is not valid JSON (near byte ", reader.error_position().value_or(0), ")"));
  }
  // Unusual shapes: leave everything to the DOM, whose readers report precise errors.
  Json root = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("tokenizer.json is not valid JSON");
  return TokenizerJson{std::move(root), std::nullopt};
}

absl::StatusOr<BpeTables> BpeTablesFromJson(const Json& model) {
  BpeTables tables;
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object()) {
    return absl::InvalidArgumentError("tokenizer.json: model.vocab must be an object");
  }
  tables.vocab.reserve(vocab->size());
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: vocab id of \"", token, "\" is not an integer"));
    }
    tables.vocab.emplace_back(token, id.get<int64_t>());
  }
  const auto merges = model.find("merges");
  if (merges == model.end() || merges->is_null()) return tables;
  if (!merges->is_array()) return absl::InvalidArgumentError("tokenizer.json: model.merges must be an array");
  for (const Json& merge : *merges) {
    const size_t number = tables.merges.size() + 1;
    if (merge.is_string()) {
      // The legacy form "left right": exactly one space, as the reference requires.
      const std::string& line = merge.get_ref<const std::string&>();
      if (line.starts_with("#version")) continue;
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer.json: malformed merge #", number, ": \"", line, "\""));
      }
      const std::string_view view(line);
      tables.merges.Add(view.substr(0, space), view.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      tables.merges.Add(merge[0].get_ref<const std::string&>(), merge[1].get_ref<const std::string&>());
    } else {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: malformed merge #", number));
    }
  }
  return tables;
}

}  // namespace llm::tokenizer_internal
