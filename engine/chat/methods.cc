// The Python methods of str, dict, list and tuple that chat templates call. Methods that would
// mutate a list or dict are refused (SecurityError), as in jinja2's immutable sandbox.
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "engine/chat/cat.h"
#include "engine/chat/builtin_args.h"
#include "engine/chat/builtins.h"
#include "engine/chat/interpreter.h"
#include "engine/chat/objects.h"
#include "engine/chat/operations.h"
#include "engine/chat/python_text.h"
#include "kernels/core/status.h"

#include <unicode/uchar.h>

namespace llm::chat {
namespace {

constexpr std::string_view kStrMethods[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith", "lower", "upper",
    "capitalize", "title", "casefold", "replace", "find", "rfind", "index", "rindex", "count", "join", "isdigit",
    "isalpha", "isalnum", "isspace", "isupper", "islower", "isnumeric", "isdecimal", "center", "ljust", "rjust",
    "zfill", "format", "partition", "rpartition", "removeprefix", "removesuffix"};
constexpr std::string_view kDictMethods[] = {"keys", "values", "items", "get", "copy"};
constexpr std::string_view kDictUnsafe[] = {"pop", "popitem", "setdefault", "update", "clear", "fromkeys"};
constexpr std::string_view kListMethods[] = {"count", "index", "copy"};
constexpr std::string_view kListUnsafe[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear"};

template <size_t N>
bool In(std::string_view name, const std::string_view (&names)[N]) {
  for (std::string_view n : names)
    if (n == name) return true;
  return false;
}

std::optional<std::string> OptionalStr(const BoundArgs& a, size_t i) {
  if (!a.Has(i) || a.Get(i)->is_none()) return std::nullopt;
  return a.Get(i)->Str();
}

absl::StatusOr<std::string> RequireStr(const BoundArgs& a, size_t i, std::string_view method) {
  if (!a.Has(i)) return TemplateError(ErrorKind::kType, Cat(method, "() takes at least 1 argument (0 given)"));
  const Value& v = *a.Get(i);
  if (!v.is_string())
    return TemplateError(ErrorKind::kType, Cat("must be str, not ", v.TypeName()));
  return v.str();
}

template <typename Pred>
bool AllChars(const std::string& s, Pred pred) {
  if (s.empty()) return false;
  for (char32_t c : DecodeUtf8(s))
    if (!pred(c)) return false;
  return true;
}

bool IsAlpha(char32_t c) {
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER: case U_LOWERCASE_LETTER: case U_TITLECASE_LETTER: case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return true;
    default:
      return false;
  }
}
bool IsDecimal(char32_t c) { return u_charType(static_cast<UChar32>(c)) == U_DECIMAL_DIGIT_NUMBER; }
bool IsDigit(char32_t c) {
  const int32_t type = u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE);
  return type == U_NT_DECIMAL || type == U_NT_DIGIT;
}
bool IsNumeric(char32_t c) {
  return u_getIntPropertyValue(static_cast<UChar32>(c), UCHAR_NUMERIC_TYPE) != U_NT_NONE;
}

absl::StatusOr<Value> Pad(const std::string& s, const BoundArgs& a, char how) {
  ASSIGN_OR_RETURN(int64_t width, ToInt(a.Or(0, Value::Int(0)), "width"));
  std::string fill = " ";
  if (a.Has(1)) {
    fill = a.Get(1)->Str();
    if (CodePointCount(fill) != 1)
      return TemplateError(ErrorKind::kType, "The fill character must be exactly one character long");
  }
  const int64_t n = CodePointCount(s);
  if (width <= n) return Value::String(s);
  const int64_t margin = width - n;
  int64_t left = how == 'l' ? 0 : how == 'r' ? margin : margin / 2 + (margin & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < margin - left; ++i) out += fill;
  return Value::String(std::move(out));
}

// str.format: {} {0} {name} fields with !r/!s and a format spec of [[fill]align][sign][0][width][.prec][type].
absl::StatusOr<std::string> ApplySpec(const Value& v, std::string_view spec) {
  if (spec.empty()) return v.Str();
  size_t i = 0;
  char fill = ' ', align = 0, sign = '-';
  if (spec.size() >= 2 && std::string_view("<>^=").find(spec[1]) != std::string_view::npos) {
    fill = spec[0];
    align = spec[1];
    i = 2;
  } else if (std::string_view("<>^=").find(spec[0]) != std::string_view::npos) {
    align = spec[0];
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  if (i < spec.size() && spec[i] == '0') {
    fill = '0';
    if (align == 0) align = '=';
    ++i;
  }
  int64_t width = 0;
  while (i < spec.size() && absl::ascii_isdigit(spec[i])) width = width * 10 + (spec[i++] - '0');
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    precision = 0;
    ++i;
    while (i < spec.size() && absl::ascii_isdigit(spec[i])) precision = precision * 10 + (spec[i++] - '0');
  }
  const char type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) return TemplateError(ErrorKind::kValue, "Invalid format specifier");
  std::string body;
  char buf[512];
  if (v.is_string()) {
    if (type != 0 && type != 's') return TemplateError(ErrorKind::kValue, "Unknown format code for str");
    body = v.str();
    if (precision >= 0) {
      std::vector<char32_t> cps = DecodeUtf8(body);
      if (static_cast<int>(cps.size()) > precision) cps.resize(precision);
      body = EncodeUtf8(cps);
    }
    if (align == 0) align = '<';
  } else if (v.is_number() && (type == 'f' || type == 'F' || type == 'e' || type == 'E' || type == 'g' ||
                               type == 'G' || type == '%' || (type == 0 && v.is_float()))) {
    double d = v.float_value();
    if (type == 0) {
      body = precision < 0 ? FloatRepr(d) : (std::snprintf(buf, sizeof buf, "%.*g", precision, d), std::string(buf));
    } else if (type == '%') {
      std::snprintf(buf, sizeof buf, "%.*f%%", precision < 0 ? 6 : precision, d * 100);
      body = buf;
    } else {
      const std::string f = Cat("%.", precision < 0 ? 6 : precision, std::string(1, type));
      std::snprintf(buf, sizeof buf, f.c_str(), d);
      body = buf;
    }
    if (sign != '-' && d >= 0) body = std::string(1, sign) + body;
    if (align == 0) align = '>';
  } else if (v.is_integral() && (type == 0 || type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b')) {
    const int64_t n = v.int_value();
    if (type == 'b') {
      uint64_t u = n < 0 ? -static_cast<uint64_t>(n) : n;
      do {
        body.insert(body.begin(), static_cast<char>('0' + (u & 1)));
        u >>= 1;
      } while (u);
      if (n < 0) body = "-" + body;
    } else {
      const std::string f = Cat("%", type == 0 ? "lld" : Cat("ll", std::string(1, type)));
      std::snprintf(buf, sizeof buf, f.c_str(), static_cast<long long>(n));
      body = buf;
    }
    if (v.is_bool() && type == 0) body = v.Str();
    if (sign != '-' && n >= 0) body = std::string(1, sign) + body;
    if (align == 0) align = '>';
  } else {
    if (type != 0) return TemplateError(ErrorKind::kValue, Cat("Unknown format code for object of type '", v.TypeName(), "'"));
    body = v.Str();
    if (align == 0) align = '<';
  }
  const int64_t n = CodePointCount(body);
  if (width <= n) return body;
  const int64_t margin = width - n;
  switch (align) {
    case '<': return body + std::string(margin, fill);
    case '^': return std::string(margin / 2, fill) + body + std::string(margin - margin / 2, fill);
    case '=':
      if (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' '))
        return body.substr(0, 1) + std::string(margin, fill) + body.substr(1);
      return std::string(margin, fill) + body;
    default: return std::string(margin, fill) + body;
  }
}

absl::StatusOr<Value> StrFormat(const std::string& format, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return TemplateError(ErrorKind::kValue, "Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = format.find('}', i);
    if (close == std::string::npos) return TemplateError(ErrorKind::kValue, "Single '{' encountered in format string");
    std::string_view field(format.data() + i + 1, close - i - 1);
    i = close;
    std::string_view spec, conv;
    if (size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string_view::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    size_t name_end = 0;
    while (name_end < field.size() && field[name_end] != '.' && field[name_end] != '[') ++name_end;
    const std::string_view name = field.substr(0, name_end);
    Value v;
    int64_t index = 0;
    if (name.empty() || absl::SimpleAtoi(AbslView(name), &index)) {
      if (name.empty()) index = static_cast<int64_t>(auto_index++);
      if (index < 0 || index >= static_cast<int64_t>(args.positional.size()))
        return TemplateError(ErrorKind::kRuntime, Cat("Replacement index ", index, " out of range"));
      v = args.positional[index];
    } else {
      bool found = false;
      for (auto& [k, val] : args.keywords) {
        if (k == name) {
          v = val;
          found = true;
        }
      }
      if (!found) return TemplateError(ErrorKind::kRuntime, Cat("KeyError: '", name, "'"));
    }
    std::string_view rest = field.substr(name_end);
    while (!rest.empty()) {
      if (rest[0] == '.') {
        size_t end = 1;
        while (end < rest.size() && rest[end] != '.' && rest[end] != '[') ++end;
        ASSIGN_OR_RETURN(v, GetAttribute(v, rest.substr(1, end - 1)));
        rest = rest.substr(end);
      } else {
        const size_t end = rest.find(']');
        if (end == std::string_view::npos) return TemplateError(ErrorKind::kValue, "Missing ']' in format string");
        const std::string_view key = rest.substr(1, end - 1);
        int64_t k = 0;
        ASSIGN_OR_RETURN(v, GetItem(v, absl::SimpleAtoi(AbslView(key), &k) ? Value::Int(k) : Value::String(std::string(key))));
        rest = rest.substr(end + 1);
      }
    }
    if (conv == "r") v = Value::String(v.Repr());
    else if (conv == "s") v = Value::String(v.Str());
    else if (!conv.empty()) return TemplateError(ErrorKind::kValue, "Unknown conversion specifier");
    ASSIGN_OR_RETURN(std::string text, ApplySpec(v, spec));
    out += text;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> StrMethod(Interpreter& in, const std::string& s, std::string_view name, CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"chars"}));
    return Value::String(std::string(PyStrip(s, OptionalStr(a, 0), name != "rstrip", name != "lstrip")));
  }
  if (name == "split" || name == "rsplit") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"sep", "maxsplit"}));
    std::optional<std::string> sep = OptionalStr(a, 0);
    if (sep && sep->empty()) return TemplateError(ErrorKind::kValue, "empty separator");
    ASSIGN_OR_RETURN(int64_t maxsplit, ToInt(a.Or(1, Value::Int(-1)), "maxsplit"));
    std::vector<std::string> parts = name == "split" ? PySplit(s, sep, maxsplit) : PyRsplit(s, sep, maxsplit);
    ValueList out;
    for (std::string& p : parts) out.push_back(Value::String(std::move(p)));
    return Value::List(std::move(out));
  }
  if (name == "splitlines") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"keepends"}));
    ValueList out;
    for (std::string& p : PySplitlines(s, a.Or(0, Value::Bool(false)).Truthy())) out.push_back(Value::String(std::move(p)));
    return Value::List(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"prefix", "start", "end"}));
    if (!a.Has(0)) return TemplateError(ErrorKind::kType, Cat(name, "() takes at least 1 argument (0 given)"));
    std::string text = s;
    if (a.Has(1) || a.Has(2)) {
      ASSIGN_OR_RETURN(Value sliced, SliceValue(Value::String(s), a.Or(1, Value::None()), a.Or(2, Value::None()),
                                                Value::None(), in));
      text = sliced.str();
    }
    ValueList candidates;
    if (a.Get(0)->is_tuple()) candidates = a.Get(0)->list();
    else candidates.push_back(*a.Get(0));
    for (const Value& c : candidates) {
      if (!c.is_string())
        return TemplateError(ErrorKind::kType, Cat(name, " first arg must be str or a tuple of str, not ",
                                                            c.TypeName()));
      const std::string& p = c.str();
      const bool hit = name == "startswith" ? text.compare(0, p.size(), p) == 0
                                            : text.size() >= p.size() && text.compare(text.size() - p.size(), p.size(), p) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "lower" || name == "upper" || name == "capitalize" || name == "title" || name == "casefold") {
    RETURN_IF_ERROR(BoundArgs::Bind(name, args, {}).status());
    if (name == "upper") return Value::String(PyUpper(s));
    if (name == "capitalize") return Value::String(PyCapitalize(s));
    if (name == "title") return Value::String(PyTitle(s));
    return Value::String(PyLower(s));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"old", "new", "count"}));
    ASSIGN_OR_RETURN(std::string old_text, RequireStr(a, 0, name));
    ASSIGN_OR_RETURN(std::string new_text, RequireStr(a, 1, name));
    ASSIGN_OR_RETURN(int64_t count, ToInt(a.Or(2, Value::Int(-1)), "count"));
    std::string out = PyReplace(s, old_text, new_text, count);
    RETURN_IF_ERROR(in.CheckSize(out.size()));
    return Value::String(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"sub"}));
    ASSIGN_OR_RETURN(std::string sub, RequireStr(a, 0, name));
    if (name == "count") return Value::Int(PyCount(s, sub));
    const int64_t at = PyFind(s, sub, name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex")) return TemplateError(ErrorKind::kValue, "substring not found");
    return Value::Int(at);
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"iterable"}));
    if (!a.Has(0)) return TemplateError(ErrorKind::kType, "join() takes exactly one argument (0 given)");
    ASSIGN_OR_RETURN(ValueList items, Iterate(*a.Get(0), in));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string())
        return TemplateError(ErrorKind::kType, Cat("sequence item ", i, ": expected str instance, ",
                                                            items[i].TypeName(), " found"));
      if (i > 0) out += s;
      out += items[i].str();
      RETURN_IF_ERROR(in.CheckSize(out.size()));
    }
    return Value::String(std::move(out));
  }
  if (name.substr(0, 2) == "is") {
    RETURN_IF_ERROR(BoundArgs::Bind(name, args, {}).status());
    if (name == "isdigit") return Value::Bool(AllChars(s, IsDigit));
    if (name == "isdecimal") return Value::Bool(AllChars(s, IsDecimal));
    if (name == "isnumeric") return Value::Bool(AllChars(s, IsNumeric));
    if (name == "isalpha") return Value::Bool(AllChars(s, IsAlpha));
    if (name == "isalnum") return Value::Bool(AllChars(s, [](char32_t c) { return IsAlpha(c) || IsNumeric(c); }));
    if (name == "isspace") return Value::Bool(AllChars(s, IsPythonSpace));
    const std::string lower = PyLower(s), upper = PyUpper(s);
    if (name == "isupper") return Value::Bool(upper == s && lower != s);
    return Value::Bool(lower == s && upper != s);  // islower
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"width", "fillchar"}));
    return Pad(s, a, name == "ljust" ? 'l' : name == "rjust" ? 'r' : 'c');
  }
  if (name == "zfill") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"width"}));
    ASSIGN_OR_RETURN(int64_t width, ToInt(a.Or(0, Value::Int(0)), "width"));
    const int64_t n = CodePointCount(s);
    if (width <= n) return Value::String(s);
    const bool signed_text = !s.empty() && (s[0] == '-' || s[0] == '+');
    std::string zeros(width - n, '0');
    return Value::String(signed_text ? s.substr(0, 1) + zeros + s.substr(1) : zeros + s);
  }
  if (name == "format") return StrFormat(s, args);
  if (name == "partition" || name == "rpartition") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"sep"}));
    ASSIGN_OR_RETURN(std::string sep, RequireStr(a, 0, name));
    if (sep.empty()) return TemplateError(ErrorKind::kValue, "empty separator");
    const size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (at == std::string::npos) {
      if (name == "partition") return Value::Tuple({Value::String(s), Value::String(""), Value::String("")});
      return Value::Tuple({Value::String(""), Value::String(""), Value::String(s)});
    }
    return Value::Tuple({Value::String(s.substr(0, at)), Value::String(sep), Value::String(s.substr(at + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"affix"}));
    ASSIGN_OR_RETURN(std::string affix, RequireStr(a, 0, name));
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0) return Value::String(s.substr(affix.size()));
    if (name == "removesuffix" && !affix.empty() && s.size() >= affix.size() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0)
      return Value::String(s.substr(0, s.size() - affix.size()));
    return Value::String(s);
  }
  return TemplateError(ErrorKind::kRuntime, Cat("unknown str method ", name));
}

absl::StatusOr<Value> DictMethod(const ValueDict& d, const Value& self, std::string_view name, CallArgs& args) {
  if (name == "get") {
    ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"key", "default"}));
    if (!a.Has(0)) return TemplateError(ErrorKind::kType, "get expected at least 1 argument, got 0");
    RETURN_IF_ERROR(CheckHashable(*a.Get(0)));
    if (const Value* v = d.Find(*a.Get(0))) return *v;
    return a.Or(1, Value::None());
  }
  RETURN_IF_ERROR(BoundArgs::Bind(name, args, {}).status());
  if (name == "copy") return self;
  ValueList out;
  out.reserve(d.size());
  for (const auto& [k, v] : d.items()) {
    if (name == "keys") out.push_back(k);
    else if (name == "values") out.push_back(v);
    else out.push_back(Value::Tuple({k, v}));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> ListMethod(const Value& self, std::string_view name, CallArgs& args) {
  if (name == "copy") {
    RETURN_IF_ERROR(BoundArgs::Bind(name, args, {}).status());
    return self;
  }
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(name, args, {"value"}));
  if (!a.Has(0)) return TemplateError(ErrorKind::kType, Cat(name, "() takes exactly one argument (0 given)"));
  int64_t count = 0;
  const ValueList& items = self.list();
  for (size_t i = 0; i < items.size(); ++i) {
    if (!Equals(items[i], *a.Get(0))) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") return TemplateError(ErrorKind::kValue, "list.index(x): x not in list");
  return Value::Int(count);
}

bool IsSafeMethod(const Value& receiver, std::string_view name) {
  if (receiver.is_string()) return In(name, kStrMethods);
  if (receiver.is_dict()) return In(name, kDictMethods);
  if (receiver.is_list()) return In(name, kListMethods);
  if (receiver.is_tuple()) return name == "count" || name == "index";
  return false;
}

bool IsUnsafeMethod(const Value& receiver, std::string_view name) {
  if (receiver.is_dict()) return In(name, kDictUnsafe);
  if (receiver.is_list()) return In(name, kListUnsafe);
  return false;
}

}  // namespace

Value MethodAttribute(const Value& receiver, std::string_view name) {
  if (IsUnsafeMethod(receiver, name)) {
    return Value::Undefined(Cat("access to attribute '", name, "' of '", receiver.TypeName(),
                                         "' object is unsafe."),
                            ErrorKind::kSecurity);
  }
  if (!IsSafeMethod(receiver, name)) return Value();
  std::string method(name);
  return Value::FromObject(std::make_shared<FunctionObject>(
      method, [receiver, method](CallArgs& args, Interpreter& in) -> absl::StatusOr<Value> {
        bool found = false;
        return CallMethod(in, receiver, method, args, &found);
      }));
}

absl::StatusOr<Value> CallMethod(Interpreter& in, const Value& receiver, std::string_view name, CallArgs& args,
                                 bool* found) {
  *found = IsSafeMethod(receiver, name);
  if (!*found) return Value();
  if (receiver.is_string()) return StrMethod(in, receiver.str(), name, args);
  if (receiver.is_dict()) return DictMethod(receiver.dict(), receiver, name, args);
  return ListMethod(receiver, name, args);
}

}  // namespace llm::chat
