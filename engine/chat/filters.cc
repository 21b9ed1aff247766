// jinja2's built-in filters (and transformers' tojson), with jinja2's argument names and
// defaults. Filters that produce generators in jinja2 (map, select, unique, ...) produce lists.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "engine/chat/cat.h"
#include "engine/chat/builtin_args.h"
#include "engine/chat/builtins.h"
#include "engine/chat/interpreter.h"
#include "engine/chat/json_value.h"
#include "engine/chat/operations.h"
#include "engine/chat/python_text.h"
#include "kernels/core/status.h"

namespace llm::chat {
namespace {

using Args = CallArgs;

absl::Status FilterArgumentError(std::string_view message) { return TemplateError(ErrorKind::kRuntime, message); }

// Sorts `items` stably by `key(item)`; TypeError when keys cannot be ordered.
absl::Status SortBy(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  absl::Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    absl::StatusOr<int> c = reverse ? Compare(keys[b], keys[a]) : Compare(keys[a], keys[b]);
    if (!c.ok()) {
      error.Update(c.status());
      return false;
    }
    return *c < 0;
  });
  RETURN_IF_ERROR(error);
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(std::move(items[i]));
  items = std::move(sorted);
  return absl::OkStatus();
}

absl::StatusOr<Value> Abs(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("abs", args, {}).status());
  if (v.is_float()) return Value::Float(std::fabs(v.float_value()));
  if (v.is_integral()) {
    if (v.int_value() == INT64_MIN) return TemplateError(ErrorKind::kOverflow, "integer result too large");
    return Value::Int(std::llabs(v.int_value()));
  }
  return TemplateError(ErrorKind::kType, Cat("bad operand type for abs(): '", v.TypeName(), "'"));
}

absl::StatusOr<Value> Attr(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("attr", args, {"name"}));
  if (!a.Has(0)) return TemplateError(ErrorKind::kType, "attr() missing required argument 'name'");
  const std::string name = ToStr(*a.Get(0));
  if (v.is_dict()) {  // an attribute, never an item
    Value method = MethodAttribute(v, name);
    if (!method.is_undefined() || method.undefined_info().kind == ErrorKind::kSecurity) return method;
    return Value::Undefined(Cat("'dict object' has no attribute '", name, "'"));
  }
  return GetAttribute(v, name);
}

absl::StatusOr<Value> Batch(Interpreter& in, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("batch", args, {"linecount", "fill_with"}));
  if (!a.Has(0)) return TemplateError(ErrorKind::kType, "batch() missing required argument 'linecount'");
  ASSIGN_OR_RETURN(int64_t count, ToInt(*a.Get(0), "linecount"));
  if (count <= 0) return TemplateError(ErrorKind::kValue, "batch size must be positive");
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  ValueList out, current;
  for (Value& item : items) {
    current.push_back(std::move(item));
    if (static_cast<int64_t>(current.size()) == count) out.push_back(Value::List(std::exchange(current, {})));
  }
  if (!current.empty()) {
    if (a.Has(1))
      while (static_cast<int64_t>(current.size()) < count) current.push_back(*a.Get(1));
    out.push_back(Value::List(std::move(current)));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Capitalize(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("capitalize", args, {}).status());
  return Value::String(PyCapitalize(v.Str()));
}

absl::StatusOr<Value> Center(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("center", args, {"width"}));
  ASSIGN_OR_RETURN(int64_t width, ToInt(a.Or(0, Value::Int(80)), "width"));
  const std::string s = v.Str();
  const int64_t n = CodePointCount(s);
  if (width <= n) return Value::String(s);
  const int64_t margin = width - n;
  const int64_t left = margin / 2 + (margin & width & 1);
  return Value::String(std::string(left, ' ') + s + std::string(margin - left, ' '));
}

absl::StatusOr<Value> Default(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("default", args, {"default_value", "boolean"}));
  const bool boolean = a.Or(1, Value::Bool(false)).Truthy();
  if (v.is_undefined() || (boolean && !v.Truthy())) return a.Or(0, Value::String(""));
  return v;
}

absl::StatusOr<Value> DictSort(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (v.is_undefined()) return v.UndefinedError();
  if (!v.is_dict())
    return TemplateError(ErrorKind::kAttribute, Cat("'", v.TypeName(), "' object has no attribute 'items'"));
  const bool case_sensitive = a.Or(0, Value::Bool(false)).Truthy();
  const std::string by = ToStr(a.Or(1, Value::String("key")));
  if (by != "key" && by != "value") return FilterArgumentError("You can only sort by either \"key\" or \"value\"");
  ValueList items;
  ValueList keys;
  for (const auto& [k, val] : v.dict().items()) {
    items.push_back(Value::Tuple({k, val}));
    const Value& key = by == "key" ? k : val;
    keys.push_back(case_sensitive ? key : IgnoreCase(key));
  }
  RETURN_IF_ERROR(SortBy(items, keys, a.Or(2, Value::Bool(false)).Truthy()));
  return Value::List(std::move(items));
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<Value> Escape(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("escape", args, {}).status());
  return Value::String(HtmlEscape(v.Str()));
}

absl::StatusOr<Value> First(Interpreter& in, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("first", args, {}).status());
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

absl::StatusOr<Value> Last(Interpreter& in, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("last", args, {}).status());
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

absl::StatusOr<Value> Float(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("float", args, {"default"}));
  if (v.is_undefined()) return v.UndefinedError();
  if (v.is_number()) return Value::Float(v.float_value());
  if (v.is_string()) {
    if (std::optional<double> d = ParsePythonFloat(v.str())) return Value::Float(*d);
  }
  return a.Or(0, Value::Float(0.0));
}

absl::StatusOr<Value> Format(Interpreter&, const Value& v, Args& args) {
  if (!args.positional.empty() && !args.keywords.empty())
    return FilterArgumentError("can't handle positional and keyword arguments at the same time");
  if (!args.keywords.empty()) {
    ValueDict kw;
    for (auto& [k, val] : args.keywords) kw.Set(Value::String(k), val);
    ASSIGN_OR_RETURN(std::string s, PercentFormat(v.Str(), Value::Dict(std::move(kw))));
    return Value::String(std::move(s));
  }
  ASSIGN_OR_RETURN(std::string s, PercentFormat(v.Str(), Value::Tuple(args.positional)));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> Indent(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("indent", args, {"width", "first", "blank"}));
  const Value width = a.Or(0, Value::Int(4));
  std::string indention;
  if (width.is_string()) {
    indention = width.str();
  } else {
    ASSIGN_OR_RETURN(int64_t w, ToInt(width, "width"));
    indention = std::string(std::max<int64_t>(w, 0), ' ');
  }
  const bool first = a.Or(1, Value::Bool(false)).Truthy();
  const bool blank = a.Or(2, Value::Bool(false)).Truthy();
  // jinja2 appends "\n" with +=, which fails or misbehaves for anything but a string.
  if (v.is_undefined()) return v.UndefinedError();
  if (v.is_list()) return TemplateError(ErrorKind::kAttribute, "'list' object has no attribute 'splitlines'");
  if (!v.is_string())
    return TemplateError(ErrorKind::kType, v.is_tuple() ? "can only concatenate tuple (not \"str\") to tuple"
                                                        : Cat("unsupported operand type(s) for +=: '", v.TypeName(), "' and 'str'"));
  const std::string s = v.Str() + "\n";  // jinja2's quirk: splitlines then sees a last empty line
  std::vector<std::string> lines = PySplitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) rv += "\n" + indention;
      rv += lines[i];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
    }
  }
  if (first) rv = indention + rv;
  return Value::String(std::move(rv));
}

absl::StatusOr<Value> Int(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("int", args, {"default", "base"}));
  if (v.is_undefined()) return v.UndefinedError();
  const Value fallback = a.Or(0, Value::Int(0));
  if (v.is_integral()) return Value::Int(v.int_value());
  if (v.is_float()) {
    const double d = v.float_value();
    if (!std::isfinite(d)) return fallback;
    if (std::fabs(d) >= 9.2e18) return TemplateError(ErrorKind::kOverflow, "integer result too large");
    return Value::Int(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    ASSIGN_OR_RETURN(int64_t base, ToInt(a.Or(1, Value::Int(10)), "base"));
    if (std::optional<int64_t> i = ParsePythonInt(v.str(), static_cast<int>(base))) return Value::Int(*i);
    // jinja2: "42.23"|int gives 42.
    if (std::optional<double> d = ParsePythonFloat(v.str()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18)
      return Value::Int(static_cast<int64_t>(*d));
  }
  return fallback;
}

absl::StatusOr<Value> Items(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("items", args, {}).status());
  if (v.is_undefined()) return Value::List({});
  if (!v.is_dict()) return TemplateError(ErrorKind::kType, "Can only get item pairs from a mapping.");
  ValueList out;
  for (const auto& [k, val] : v.dict().items()) out.push_back(Value::Tuple({k, val}));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Join(Interpreter& in, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("join", args, {"d", "attribute"}));
  const std::string sep = ToStr(a.Or(0, Value::String("")));
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  RETURN_IF_ERROR(in.CountIterations(static_cast<int64_t>(items.size())));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    if (a.Has(1)) {
      ASSIGN_OR_RETURN(Value item, GetPath(items[i], *a.Get(1)));
      item.AppendStr(&out);
    } else {
      items[i].AppendStr(&out);
    }
    RETURN_IF_ERROR(in.CheckSize(out.size()));
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Length(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("length", args, {}).status());
  ASSIGN_OR_RETURN(int64_t n, Length(v));
  return Value::Int(n);
}

absl::StatusOr<Value> ListFilter(Interpreter& in, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("list", args, {}).status());
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  return Value::List(std::move(items));
}

absl::StatusOr<Value> Lower(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("lower", args, {}).status());
  return Value::String(PyLower(v.Str()));
}

absl::StatusOr<Value> Upper(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("upper", args, {}).status());
  return Value::String(PyUpper(v.Str()));
}

absl::StatusOr<Value> Map(Interpreter& in, const Value& v, Args& args) {
  if (!v.Truthy()) return Value::List({});  // jinja2 iterates only `if value`
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  RETURN_IF_ERROR(in.CountIterations(static_cast<int64_t>(items.size())));
  ValueList out;
  out.reserve(items.size());
  if (args.positional.empty()) {
    Value attribute, fallback;
    bool has_default = false;
    for (auto& [k, val] : args.keywords) {
      if (k == "attribute") {
        attribute = val;
      } else if (k == "default") {
        fallback = val;
        has_default = true;
      } else {
        return FilterArgumentError(Cat("Unexpected keyword argument '", k, "'"));
      }
    }
    if (attribute.is_undefined()) return FilterArgumentError("map requires a filter argument");
    for (const Value& item : items) {
      ASSIGN_OR_RETURN(Value got, GetPath(item, attribute));
      out.push_back(got.is_undefined() && has_default ? fallback : got);
    }
    return Value::List(std::move(out));
  }
  const std::string name = ToStr(args.positional[0]);
  FilterFn fn = FindFilter(name);
  if (fn == nullptr) return FilterArgumentError(Cat("No filter named '", name, "'."));
  for (const Value& item : items) {
    CallArgs rest{ValueList(args.positional.begin() + 1, args.positional.end()), args.keywords};
    ASSIGN_OR_RETURN(Value mapped, fn(in, item, rest));
    out.push_back(std::move(mapped));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MinMax(Interpreter& in, const Value& v, Args& args, bool max) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind(max ? "max" : "min", args, {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const bool case_sensitive = a.Or(0, Value::Bool(false)).Truthy();
  auto key = [&](const Value& item) -> absl::StatusOr<Value> {
    Value k = item;
    if (a.Has(1)) {
      ASSIGN_OR_RETURN(k, GetPath(item, *a.Get(1)));
    }
    return case_sensitive ? k : IgnoreCase(k);
  };
  size_t best = 0;
  ASSIGN_OR_RETURN(Value best_key, key(items[0]));
  for (size_t i = 1; i < items.size(); ++i) {
    ASSIGN_OR_RETURN(Value k, key(items[i]));
    ASSIGN_OR_RETURN(int c, Compare(k, best_key));
    if (max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(k);
    }
  }
  return items[best];
}

absl::StatusOr<Value> Max(Interpreter& in, const Value& v, Args& args) { return MinMax(in, v, args, true); }
absl::StatusOr<Value> Min(Interpreter& in, const Value& v, Args& args) { return MinMax(in, v, args, false); }

// select / reject / selectattr / rejectattr.
absl::StatusOr<Value> SelectOrReject(Interpreter& in, const Value& v, Args& args, bool with_attr, bool select) {
  if (!v.Truthy()) return Value::List({});  // jinja2 iterates only `if value`
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  RETURN_IF_ERROR(in.CountIterations(static_cast<int64_t>(items.size())));
  size_t next = 0;
  Value attribute;
  if (with_attr) {
    if (args.positional.empty()) return TemplateError(ErrorKind::kType, "Missing parameter for attribute name");
    attribute = args.positional[next++];
  }
  TestFn test = nullptr;
  if (next < args.positional.size()) {
    const std::string name = ToStr(args.positional[next++]);
    test = FindTest(name);
    if (test == nullptr) return TemplateError(ErrorKind::kRuntime, Cat("No test named '", name, "'."));
  }
  ValueList out;
  for (Value& item : items) {
    Value probe = item;
    if (with_attr) {
      ASSIGN_OR_RETURN(probe, GetPath(item, attribute));
    }
    bool ok;
    if (test != nullptr) {
      CallArgs rest{ValueList(args.positional.begin() + next, args.positional.end()), args.keywords};
      ASSIGN_OR_RETURN(ok, test(in, probe, rest));
    } else {
      ok = probe.Truthy();
    }
    if (ok == select) out.push_back(std::move(item));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Select(Interpreter& in, const Value& v, Args& a) { return SelectOrReject(in, v, a, false, true); }
absl::StatusOr<Value> Reject(Interpreter& in, const Value& v, Args& a) { return SelectOrReject(in, v, a, false, false); }
absl::StatusOr<Value> SelectAttr(Interpreter& in, const Value& v, Args& a) { return SelectOrReject(in, v, a, true, true); }
absl::StatusOr<Value> RejectAttr(Interpreter& in, const Value& v, Args& a) { return SelectOrReject(in, v, a, true, false); }

absl::StatusOr<Value> Replace(Interpreter& in, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("replace", args, {"old", "new", "count"}));
  if (!a.Has(0) || !a.Has(1)) return TemplateError(ErrorKind::kType, "replace() missing required arguments");
  int64_t count = -1;
  if (a.Has(2) && !a.Get(2)->is_none()) {
    ASSIGN_OR_RETURN(count, ToInt(*a.Get(2), "count"));
  }
  std::string out = PyReplace(v.Str(), ToStr(*a.Get(0)), ToStr(*a.Get(1)), count);
  RETURN_IF_ERROR(in.CheckSize(out.size()));
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Reverse(Interpreter& in, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("reverse", args, {}).status());
  if (v.is_string()) {
    std::vector<char32_t> cps = DecodeUtf8(v.str());
    std::reverse(cps.begin(), cps.end());
    return Value::String(EncodeUtf8(cps));
  }
  absl::StatusOr<ValueList> iterated = Iterate(v, in);
  if (!iterated.ok()) return FilterArgumentError("argument must be iterable");
  ValueList items = *std::move(iterated);
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items));
}

double PythonRound(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits >= 0) {
    if (digits > 300) return x;
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(digits), x);  // correctly rounded, half to even
    return std::strtod(buf, nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  const double y = x / scale;
  double r = std::nearbyint(y);  // half to even
  return r * scale;
}

absl::StatusOr<Value> Round(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("round", args, {"precision", "method"}));
  ASSIGN_OR_RETURN(int64_t precision, ToInt(a.Or(0, Value::Int(0)), "precision"));
  const std::string method = ToStr(a.Or(1, Value::String("common")));
  if (method != "common" && method != "ceil" && method != "floor")
    return FilterArgumentError("method must be common, ceil or floor");
  if (v.is_undefined()) return v.UndefinedError();
  if (!v.is_number())
    return TemplateError(ErrorKind::kType, Cat("type ", v.TypeName(), " doesn't define __round__ method"));
  if (method == "common") {
    if (v.is_integral()) {
      if (precision >= 0) return Value::Int(v.int_value());
      return Value::Int(static_cast<int64_t>(PythonRound(static_cast<double>(v.int_value()), precision)));
    }
    return Value::Float(PythonRound(v.float_value(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.float_value() * scale;
  return Value::Float((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

absl::StatusOr<Value> Safe(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("safe", args, {}).status());
  return Value::String(v.Str());
}

absl::StatusOr<Value> Slice(Interpreter& in, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("slice", args, {"slices", "fill_with"}));
  if (!a.Has(0)) return TemplateError(ErrorKind::kType, "slice() missing required argument 'slices'");
  ASSIGN_OR_RETURN(int64_t slices, ToInt(*a.Get(0), "slices"));
  if (slices <= 0) return TemplateError(ErrorKind::kZeroDivision, "integer division or modulo by zero");
  ASSIGN_OR_RETURN(ValueList seq, Iterate(v, in));
  const int64_t length = static_cast<int64_t>(seq.size());
  const int64_t per = length / slices, with_extra = length % slices;
  int64_t offset = 0;
  ValueList out;
  for (int64_t i = 0; i < slices; ++i) {
    const int64_t start = offset + i * per;
    if (i < with_extra) ++offset;
    const int64_t end = offset + (i + 1) * per;
    ValueList part(seq.begin() + start, seq.begin() + end);
    if (a.Has(1) && i >= with_extra) part.push_back(*a.Get(1));
    out.push_back(Value::List(std::move(part)));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> Sort(Interpreter& in, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("sort", args, {"reverse", "case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  RETURN_IF_ERROR(in.CountIterations(static_cast<int64_t>(items.size())));
  const bool case_sensitive = a.Or(1, Value::Bool(false)).Truthy();
  ValueList keys;
  for (const Value& item : items) {
    Value k = item;
    if (a.Has(2) && !a.Get(2)->is_none()) {
      ASSIGN_OR_RETURN(k, GetPath(item, *a.Get(2)));
    }
    keys.push_back(case_sensitive ? k : IgnoreCase(k));
  }
  RETURN_IF_ERROR(SortBy(items, keys, a.Or(0, Value::Bool(false)).Truthy()));
  return Value::List(std::move(items));
}

absl::StatusOr<Value> StringFilter(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("string", args, {}).status());
  return Value::String(v.Str());
}

absl::StatusOr<Value> Sum(Interpreter& in, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("sum", args, {"attribute", "start"}));
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  RETURN_IF_ERROR(in.CountIterations(static_cast<int64_t>(items.size())));
  Value total = a.Or(1, Value::Int(0));
  for (const Value& item : items) {
    Value x = item;
    if (a.Has(0) && !a.Get(0)->is_none()) {
      ASSIGN_OR_RETURN(x, GetPath(item, *a.Get(0)));
    }
    ASSIGN_OR_RETURN(total, BinaryOperation(BinaryOp::kAdd, total, x, in));
  }
  return total;
}

absl::StatusOr<Value> Title(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("title", args, {}).status());
  // jinja2's own title: words begin after whitespace and -({[<, each gets upper() + lower().
  const std::string s = v.Str();
  const std::vector<char32_t> cps = DecodeUtf8(s);
  auto is_sep = [](char32_t c) {
    return IsPythonSpace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
  };
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    const bool sep = is_sep(cps[i]);
    while (j < cps.size() && is_sep(cps[j]) == sep) ++j;
    const std::string part = EncodeUtf8(std::vector<char32_t>(cps.begin() + i, cps.begin() + j));
    if (sep) {
      out += part;
    } else {
      std::string first;
      AppendUtf8(cps[i], &first);
      out += PyUpper(first) + PyLower(EncodeUtf8(std::vector<char32_t>(cps.begin() + i + 1, cps.begin() + j)));
    }
    i = j;
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> ToJsonFilter(Interpreter& in, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonDumpOptions options;
  options.ensure_ascii = a.Or(0, Value::Bool(false)).Truthy();
  const Value indent = a.Or(1, Value::None());
  if (indent.is_string()) {
    options.indent = indent.str();
  } else if (indent.is_integral()) {
    options.indent = std::string(std::max<int64_t>(indent.int_value(), 0), ' ');
  } else if (!indent.is_none()) {
    return TemplateError(ErrorKind::kType, "indent must be an int or a string");
  }
  if (options.indent) options.item_separator = ",";
  const Value separators = a.Or(2, Value::None());
  if (!separators.is_none()) {
    if (!separators.is_sequence() || separators.list().size() != 2 || !separators.list()[0].is_string() ||
        !separators.list()[1].is_string())
      return TemplateError(ErrorKind::kValue, "separators must be a pair of strings");
    options.item_separator = separators.list()[0].str();
    options.key_separator = separators.list()[1].str();
  }
  options.sort_keys = a.Or(3, Value::Bool(false)).Truthy();
  ASSIGN_OR_RETURN(std::string text, DumpJson(v, options));
  RETURN_IF_ERROR(in.CheckSize(text.size()));
  return Value::String(std::move(text));
}

absl::StatusOr<Value> Trim(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("trim", args, {"chars"}));
  std::optional<std::string> chars;
  if (a.Has(0) && !a.Get(0)->is_none()) chars = ToStr(*a.Get(0));
  const std::string s = v.Str();
  return Value::String(std::string(PyStrip(s, chars, true, true)));
}

absl::StatusOr<Value> Truncate(Interpreter&, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("truncate", args, {"length", "killwords", "end", "leeway"}));
  ASSIGN_OR_RETURN(int64_t length, ToInt(a.Or(0, Value::Int(255)), "length"));
  const bool killwords = a.Or(1, Value::Bool(false)).Truthy();
  const std::string end = ToStr(a.Or(2, Value::String("...")));
  ASSIGN_OR_RETURN(int64_t leeway, ToInt(a.Or(3, Value::Int(5)), "leeway"));
  const std::vector<char32_t> s = DecodeUtf8(v.Str());
  const int64_t end_len = CodePointCount(end);
  if (length < end_len || leeway < 0) return TemplateError(ErrorKind::kRuntime, "invalid truncate arguments");
  if (static_cast<int64_t>(s.size()) <= length + leeway) return Value::String(EncodeUtf8(s));
  std::string head = EncodeUtf8(std::vector<char32_t>(s.begin(), s.begin() + (length - end_len)));
  if (killwords) return Value::String(head + end);
  const size_t space = head.rfind(' ');
  if (space != std::string::npos) head = head.substr(0, space);
  return Value::String(head + end);
}

absl::StatusOr<Value> Unique(Interpreter& in, const Value& v, Args& args) {
  ASSIGN_OR_RETURN(BoundArgs a, BoundArgs::Bind("unique", args, {"case_sensitive", "attribute"}));
  ASSIGN_OR_RETURN(ValueList items, Iterate(v, in));
  RETURN_IF_ERROR(in.CountIterations(static_cast<int64_t>(items.size())));
  const bool case_sensitive = a.Or(0, Value::Bool(false)).Truthy();
  ValueList out, seen;
  for (Value& item : items) {
    Value k = item;
    if (a.Has(1) && !a.Get(1)->is_none()) {
      ASSIGN_OR_RETURN(k, GetPath(item, *a.Get(1)));
    }
    if (!case_sensitive) k = IgnoreCase(k);
    RETURN_IF_ERROR(CheckHashable(k));
    bool dup = false;
    for (const Value& s : seen) {
      if (Equals(s, k)) {
        dup = true;
        break;
      }
    }
    if (dup) continue;
    seen.push_back(std::move(k));
    out.push_back(std::move(item));
  }
  return Value::List(std::move(out));
}

absl::StatusOr<Value> WordCount(Interpreter&, const Value& v, Args& args) {
  RETURN_IF_ERROR(BoundArgs::Bind("wordcount", args, {}).status());
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(v.Str())) {
    const bool word_char = c == '_' || (c < 0x80 ? std::isalnum(static_cast<int>(c)) != 0 : !IsPythonSpace(c));
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::Int(words);
}

const absl::flat_hash_map<std::string_view, FilterFn>& Filters() {
  static const auto* filters = new absl::flat_hash_map<std::string_view, FilterFn>{
      {"abs", Abs},         {"attr", Attr},           {"batch", Batch},       {"capitalize", Capitalize},
      {"center", Center},   {"count", Length},        {"d", Default},         {"default", Default},
      {"dictsort", DictSort}, {"e", Escape},          {"escape", Escape},     {"first", First},
      {"float", Float},     {"forceescape", Escape},  {"format", Format},     {"indent", Indent},
      {"int", Int},         {"items", Items},         {"join", Join},         {"last", Last},
      {"length", Length},   {"list", ListFilter},     {"lower", Lower},       {"map", Map},
      {"max", Max},         {"min", Min},             {"reject", Reject},     {"rejectattr", RejectAttr},
      {"replace", Replace}, {"reverse", Reverse},     {"round", Round},       {"safe", Safe},
      {"select", Select},   {"selectattr", SelectAttr}, {"slice", Slice},     {"sort", Sort},
      {"string", StringFilter}, {"sum", Sum},         {"title", Title},       {"tojson", ToJsonFilter},
      {"trim", Trim},       {"truncate", Truncate},   {"unique", Unique},     {"upper", Upper},
      {"wordcount", WordCount},
  };
  return *filters;
}

}  // namespace

FilterFn FindFilter(std::string_view name) {
  auto it = Filters().find(name);
  return it == Filters().end() ? nullptr : it->second;
}

}  // namespace llm::chat
