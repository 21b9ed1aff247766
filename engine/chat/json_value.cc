#include "engine/chat/json_value.h"

#include <algorithm>
#include <cmath>

#include "engine/chat/cat.h"
#include "engine/chat/python_text.h"
#include "kernels/core/status.h"

namespace llm::chat {
namespace {

void AppendUnicodeEscape(uint32_t unit, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->append("\\u");
  for (int k = 3; k >= 0; --k) out->push_back(kHex[(unit >> (4 * k)) & 15]);
}

void AppendJsonString(std::string_view text, bool ensure_ascii, std::string* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  if (ensure_ascii && !IsAscii(text)) {
    for (char32_t c : DecodeUtf8(text)) {
      if (c >= 0x80) {
        if (c > 0xFFFF) {
          const uint32_t v = c - 0x10000;
          AppendUnicodeEscape(0xD800 | (v >> 10), out);
          AppendUnicodeEscape(0xDC00 | (v & 0x3FF), out);
        } else {
          AppendUnicodeEscape(c, out);
        }
      } else {
        const char ascii = static_cast<char>(c);
        std::string one;
        AppendJsonString(std::string_view(&ascii, 1), false, &one);
        out->append(one.substr(1, one.size() - 2));
      }
    }
    out->push_back('"');
    return;
  }
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      default:
        if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
          out->append("\\u00");
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

void AppendJsonFloat(double v, std::string* out) {
  if (std::isnan(v)) {
    out->append("NaN");
  } else if (std::isinf(v)) {
    out->append(v > 0 ? "Infinity" : "-Infinity");
  } else {
    out->append(FloatRepr(v));
  }
}

// A dict key as json.dumps writes it: strings as they are, numbers, booleans and None spelled.
absl::StatusOr<std::string> KeyText(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return key.str();
    case Value::Kind::kBool: return std::string(key.bool_value() ? "true" : "false");
    case Value::Kind::kInt: return Cat(key.int_value());
    case Value::Kind::kNone: return std::string("null");
    case Value::Kind::kFloat: {
      std::string s;
      AppendJsonFloat(key.float_value(), &s);
      return s;
    }
    default:
      return TemplateError(ErrorKind::kType, Cat("keys must be str, int, float, bool or None, not ",
                                                          key.TypeName()));
  }
}

class Dumper {
 public:
  explicit Dumper(const JsonDumpOptions& options) : options_(options) {}

  absl::Status Dump(const Value& value, int level, std::string* out) {
    if (level > kMaxDepth) return TemplateError(ErrorKind::kLimit, "tojson: value nested too deeply");
    switch (value.kind()) {
      case Value::Kind::kNone: out->append("null"); return absl::OkStatus();
      case Value::Kind::kBool: out->append(value.bool_value() ? "true" : "false"); return absl::OkStatus();
      case Value::Kind::kInt: CatAppend(out, value.int_value()); return absl::OkStatus();
      case Value::Kind::kFloat: AppendJsonFloat(value.float_value(), out); return absl::OkStatus();
      case Value::Kind::kString: AppendJsonString(value.str(), options_.ensure_ascii, out); return absl::OkStatus();
      case Value::Kind::kList:
      case Value::Kind::kTuple: return DumpList(value.list(), level, out);
      case Value::Kind::kDict: return DumpDict(value.dict(), level, out);
      default:
        return TemplateError(ErrorKind::kType,
                             Cat("Object of type ", value.TypeName(), " is not JSON serializable"));
    }
  }

 private:
  static constexpr int kMaxDepth = 512;

  void NewLine(int level, std::string* out) const {
    out->push_back('\n');
    for (int i = 0; i < level; ++i) out->append(*options_.indent);
  }

  absl::Status DumpList(const ValueList& items, int level, std::string* out) {
    if (items.empty()) {
      out->append("[]");
      return absl::OkStatus();
    }
    out->push_back('[');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out->append(options_.item_separator);
      if (options_.indent) NewLine(level + 1, out);
      RETURN_IF_ERROR(Dump(items[i], level + 1, out));
    }
    if (options_.indent) NewLine(level, out);
    out->push_back(']');
    return absl::OkStatus();
  }

  absl::Status DumpDict(const ValueDict& dict, int level, std::string* out) {
    if (dict.empty()) {
      out->append("{}");
      return absl::OkStatus();
    }
    std::vector<const std::pair<Value, Value>*> items;
    items.reserve(dict.size());
    for (const auto& item : dict.items()) items.push_back(&item);
    if (options_.sort_keys) {
      absl::Status error;
      std::stable_sort(items.begin(), items.end(), [&](const auto* a, const auto* b) {
        absl::StatusOr<int> c = Compare(a->first, b->first);
        if (!c.ok()) {
          error.Update(c.status());
          return false;
        }
        return *c < 0;
      });
      RETURN_IF_ERROR(error);
    }
    out->push_back('{');
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out->append(options_.item_separator);
      if (options_.indent) NewLine(level + 1, out);
      ASSIGN_OR_RETURN(std::string key, KeyText(items[i]->first));
      AppendJsonString(key, options_.ensure_ascii, out);
      out->append(options_.key_separator);
      RETURN_IF_ERROR(Dump(items[i]->second, level + 1, out));
    }
    if (options_.indent) NewLine(level, out);
    out->push_back('}');
    return absl::OkStatus();
  }

  const JsonDumpOptions& options_;
};

}  // namespace

absl::StatusOr<std::string> DumpJson(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  RETURN_IF_ERROR(Dumper(options).Dump(value, 0, &out));
  return out;
}

Value FromJson(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::None();
    case nlohmann::ordered_json::value_t::boolean: return Value::Bool(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::Int(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      return u <= static_cast<uint64_t>(INT64_MAX) ? Value::Int(static_cast<int64_t>(u))
                                                   : Value::Float(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::Float(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::String(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      ValueList items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(FromJson(item));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict dict;
      for (const auto& [key, item] : json.items()) dict.Set(Value::String(key), FromJson(item));
      return Value::Dict(std::move(dict));
    }
    default:
      return Value::None();
  }
}

absl::StatusOr<Value> ParseJson(std::string_view text) {
  nlohmann::ordered_json json = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError("invalid JSON");
  return FromJson(json);
}

}  // namespace llm::chat
