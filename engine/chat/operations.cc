#include "engine/chat/operations.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "engine/chat/cat.h"
#include "engine/chat/builtins.h"
#include "engine/chat/interpreter.h"
#include "engine/chat/python_text.h"
#include "kernels/core/status.h"

namespace llm::chat {
namespace {

absl::Status TypeError(std::string_view message) { return TemplateError(ErrorKind::kType, message); }

absl::Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return TypeError(Cat("unsupported operand type(s) for ", op, ": '", a.TypeName(), "' and '",
                                b.TypeName(), "'"));
}

absl::Status IntOverflow() { return TemplateError(ErrorKind::kOverflow, "integer result too large"); }

// The object kind as jinja2 names it in "has no attribute" messages.
std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  return Cat(v.TypeName(), " object");
}

Value MissingAttribute(const Value& object, std::string_view name) {
  return Value::Undefined(Cat("'", ObjectTypeRepr(object), "' has no attribute '", name, "'"));
}

Value MissingElement(const Value& object, const Value& key) {
  return Value::Undefined(Cat(ObjectTypeRepr(object), " has no element ", key.Repr()));
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t times, Interpreter& in) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    RETURN_IF_ERROR(in.CheckSize(seq.str().size() * static_cast<size_t>(times)));
    std::string out;
    out.reserve(seq.str().size() * times);
    for (int64_t i = 0; i < times; ++i) out += seq.str();
    return Value::String(std::move(out));
  }
  RETURN_IF_ERROR(in.CheckSize(seq.list().size() * static_cast<size_t>(times)));
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list().begin(), seq.list().end());
  return seq.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
}

absl::StatusOr<Value> IntPow(int64_t base, int64_t exp) {
  int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return IntOverflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return IntOverflow();
  }
  return Value::Int(result);
}

// CPython's float floor division and modulo (signs follow the divisor).
void FloatDivMod(double vx, double wx, double* floordiv, double* mod) {
  double m = std::fmod(vx, wx);
  double div = (vx - m) / wx;
  if (m != 0) {
    if ((wx < 0) != (m < 0)) {
      m += wx;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, wx);
  }
  double fd;
  if (div != 0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *floordiv = fd;
  *mod = m;
}

absl::StatusOr<Value> Arithmetic(BinaryOp op, const Value& a, const Value& b) {
  const bool ints = a.is_integral() && b.is_integral();
  const int64_t x = ints ? a.int_value() : 0, y = ints ? b.int_value() : 0;
  const double fx = a.float_value(), fy = b.float_value();
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (!ints) return Value::Float(fx + fy);
      if (__builtin_add_overflow(x, y, &r)) return IntOverflow();
      return Value::Int(r);
    case BinaryOp::kSub:
      if (!ints) return Value::Float(fx - fy);
      if (__builtin_sub_overflow(x, y, &r)) return IntOverflow();
      return Value::Int(r);
    case BinaryOp::kMul:
      if (!ints) return Value::Float(fx * fy);
      if (__builtin_mul_overflow(x, y, &r)) return IntOverflow();
      return Value::Int(r);
    case BinaryOp::kDiv:
      if (fy == 0) return TemplateError(ErrorKind::kZeroDivision, "division by zero");
      if (ints) return Value::Float(static_cast<double>(x) / static_cast<double>(y));
      return Value::Float(fx / fy);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (ints) {
        if (y == 0)
          return TemplateError(ErrorKind::kZeroDivision,
                               op == BinaryOp::kMod ? "integer modulo by zero" : "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
          if (op == BinaryOp::kMod) return Value::Int(0);
          return IntOverflow();
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          m += y;
          --q;
        }
        return Value::Int(op == BinaryOp::kMod ? m : q);
      }
      if (fy == 0)
        return TemplateError(ErrorKind::kZeroDivision, op == BinaryOp::kMod ? "float modulo" : "float floor division by zero");
      double fd, m;
      FloatDivMod(fx, fy, &fd, &m);
      return Value::Float(op == BinaryOp::kMod ? m : fd);
    }
    case BinaryOp::kPow:
      if (ints && y >= 0) return IntPow(x, y);
      if (fx == 0 && fy < 0)
        return TemplateError(ErrorKind::kZeroDivision, "0.0 cannot be raised to a negative power");
      if (fx < 0 && fy != std::floor(fy))
        return TemplateError(ErrorKind::kValue, "negative number cannot be raised to a fractional power");
      return Value::Float(std::pow(fx, fy));
    default:
      return TypeError("bad operator");
  }
}

std::string_view OpSymbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "** or pow()";
    default: return "?";
  }
}

// Python's slice index normalization (PySlice_AdjustIndices); returns the selected positions.
absl::StatusOr<std::vector<int64_t>> SliceIndices(int64_t length, const Value& start_v, const Value& stop_v,
                                                  const Value& step_v) {
  auto as_index = [](const Value& v, int64_t fallback) -> absl::StatusOr<int64_t> {
    if (v.is_undefined() || v.is_none()) return fallback;
    if (!v.is_integral())
      return TypeError("slice indices must be integers or None or have an __index__ method");
    return v.int_value();
  };
  ASSIGN_OR_RETURN(const int64_t step, as_index(step_v, 1));
  if (step == 0) return TemplateError(ErrorKind::kValue, "slice step cannot be zero");
  ASSIGN_OR_RETURN(int64_t start, as_index(start_v, step < 0 ? INT64_MAX : 0));
  ASSIGN_OR_RETURN(int64_t stop, as_index(stop_v, step < 0 ? INT64_MIN : INT64_MAX));
  auto adjust = [&](int64_t* i) {
    if (*i < 0) {
      if (*i != INT64_MIN) *i += length;
      if (*i < 0) *i = step < 0 ? -1 : 0;
    } else if (*i >= length) {
      *i = step < 0 ? length - 1 : length;
    }
  };
  adjust(&start);
  adjust(&stop);
  std::vector<int64_t> out;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) out.push_back(i);
  } else {
    for (int64_t i = start; i > stop; i += step) out.push_back(i);
  }
  return out;
}

}  // namespace

absl::StatusOr<Value> BinaryOperation(BinaryOp op, const Value& a, const Value& b, Interpreter& in) {
  if (a.is_undefined()) return a.UndefinedError();
  if (b.is_undefined()) return b.UndefinedError();
  if (a.is_number() && b.is_number()) return Arithmetic(op, a, b);
  switch (op) {
    case BinaryOp::kAdd:
      if (a.is_string() && b.is_string()) {
        RETURN_IF_ERROR(in.CheckSize(a.str().size() + b.str().size()));
        return Value::String(a.str() + b.str());
      }
      if ((a.is_list() && b.is_list()) || (a.is_tuple() && b.is_tuple())) {
        RETURN_IF_ERROR(in.CheckSize(a.list().size() + b.list().size()));
        ValueList out = a.list();
        out.insert(out.end(), b.list().begin(), b.list().end());
        return a.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
      }
      if (a.is_string())
        return TypeError(Cat("can only concatenate str (not \"", b.TypeName(), "\") to str"));
      if (a.is_list())
        return TypeError(Cat("can only concatenate list (not \"", b.TypeName(), "\") to list"));
      break;
    case BinaryOp::kMul:
      if ((a.is_string() || a.is_sequence()) && b.is_integral()) return Repeat(a, b.int_value(), in);
      if (a.is_integral() && (b.is_string() || b.is_sequence())) return Repeat(b, a.int_value(), in);
      if (a.is_string() || b.is_string())
        return TypeError(Cat("can't multiply sequence by non-int of type '",
                                      (a.is_string() ? b : a).TypeName(), "'"));
      break;
    case BinaryOp::kMod:
      if (a.is_string()) {
        ASSIGN_OR_RETURN(std::string text, PercentFormat(a.str(), b));
        return Value::String(std::move(text));
      }
      break;
    default:
      break;
  }
  return Unsupported(OpSymbol(op), a, b);
}

absl::StatusOr<Value> Negate(const Value& a, bool negative) {
  if (a.is_undefined()) return a.UndefinedError();
  if (!a.is_number())
    return TypeError(Cat("bad operand type for unary ", negative ? "-" : "+", ": '", a.TypeName(), "'"));
  if (a.is_float()) return Value::Float(negative ? -a.float_value() : a.float_value());
  if (negative && a.int_value() == INT64_MIN) return IntOverflow();
  return Value::Int(negative ? -a.int_value() : a.int_value());
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string())
        return TypeError(Cat("'in <string>' requires string as left operand, not ", item.TypeName()));
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      for (const Value& v : container.list())
        if (Equals(v, item)) return true;
      return false;
    case Value::Kind::kDict:
      RETURN_IF_ERROR(CheckHashable(item));
      return container.dict().Find(item) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      return TypeError(Cat("argument of type '", container.TypeName(), "' is not iterable"));
  }
}

absl::StatusOr<ValueList> Iterate(const Value& value, Interpreter& in) {
  switch (value.kind()) {
    case Value::Kind::kList:
    case Value::Kind::kTuple:
      return value.list();
    case Value::Kind::kDict: {
      ValueList keys;
      keys.reserve(value.dict().size());
      for (const auto& [k, v] : value.dict().items()) keys.push_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      const std::string& s = value.str();
      for (size_t pos = 0; pos < s.size();) {
        size_t len = 1;
        const auto lead = static_cast<uint8_t>(s[pos]);
        if (lead >= 0xF0) len = 4;
        else if (lead >= 0xE0) len = 3;
        else if (lead >= 0xC0) len = 2;
        chars.push_back(Value::String(s.substr(pos, len)));
        pos += len;
      }
      return chars;
    }
    case Value::Kind::kUndefined:
      return ValueList{};
    default:
      return TypeError(Cat("'", value.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kString: return CodePointCount(value.str());
    case Value::Kind::kList:
    case Value::Kind::kTuple: return static_cast<int64_t>(value.list().size());
    case Value::Kind::kDict: return static_cast<int64_t>(value.dict().size());
    case Value::Kind::kUndefined: return 0;
    default: return TypeError(Cat("object of type '", value.TypeName(), "' has no len()"));
  }
}

absl::StatusOr<Value> GetAttribute(const Value& object, std::string_view name) {
  if (object.is_undefined()) return object.UndefinedError();
  if (name.size() > 4 && name.substr(0, 2) == "__" && name.substr(name.size() - 2) == "__") {
    return Value::Undefined(
        Cat("access to attribute '", name, "' of '", object.TypeName(), "' object is unsafe."),
        ErrorKind::kSecurity);
  }
  switch (object.kind()) {
    case Value::Kind::kString:
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kDict: {
      Value method = MethodAttribute(object, name);
      if (!method.is_undefined() || method.undefined_info().kind == ErrorKind::kSecurity) return method;
      if (object.is_dict()) {
        if (const Value* v = object.dict().Find(name)) return *v;
      }
      return MissingAttribute(object, name);
    }
    case Value::Kind::kObject:
      return object.object()->GetAttr(name);
    default:
      return MissingAttribute(object, name);
  }
}

absl::StatusOr<Value> GetItem(const Value& object, const Value& key) {
  if (object.is_undefined()) return object.UndefinedError();
  switch (object.kind()) {
    case Value::Kind::kDict: {
      if (CheckHashable(key).ok()) {
        if (const Value* v = object.dict().Find(key)) return *v;
      }
      break;
    }
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kString: {
      if (!key.is_integral()) break;
      int64_t index = key.int_value();
      if (object.is_string()) {
        const std::string& s = object.str();
        if (IsAscii(s)) {
          const int64_t n = static_cast<int64_t>(s.size());
          if (index < 0) index += n;
          if (index < 0 || index >= n) return MissingElement(object, key);
          return Value::String(std::string(1, s[index]));
        }
        const std::vector<char32_t> cps = DecodeUtf8(s);
        const int64_t n = static_cast<int64_t>(cps.size());
        if (index < 0) index += n;
        if (index < 0 || index >= n) return MissingElement(object, key);
        std::string out;
        AppendUtf8(cps[index], &out);
        return Value::String(std::move(out));
      }
      const int64_t n = static_cast<int64_t>(object.list().size());
      if (index < 0) index += n;
      if (index < 0 || index >= n) return MissingElement(object, key);
      return object.list()[index];
    }
    default:
      break;
  }
  // As jinja2's sandbox: a failed subscript with a string falls back to the attribute.
  if (key.is_string()) {
    if (object.is_dict()) {
      Value method = MethodAttribute(object, key.str());
      if (!method.is_undefined() || method.undefined_info().kind == ErrorKind::kSecurity) return method;
      return MissingElement(object, key);
    }
    return GetAttribute(object, key.str());
  }
  return MissingElement(object, key);
}

absl::StatusOr<Value> SliceValue(const Value& object, const Value& start, const Value& stop, const Value& step,
                                 Interpreter& in) {
  if (object.is_undefined()) return object.UndefinedError();
  if (object.is_string()) {
    const std::string& s = object.str();
    if (IsAscii(s)) {
      ASSIGN_OR_RETURN(std::vector<int64_t> idx, SliceIndices(static_cast<int64_t>(s.size()), start, stop, step));
      std::string out;
      out.reserve(idx.size());
      for (int64_t i : idx) out.push_back(s[i]);
      return Value::String(std::move(out));
    }
    const std::vector<char32_t> cps = DecodeUtf8(s);
    ASSIGN_OR_RETURN(std::vector<int64_t> idx, SliceIndices(static_cast<int64_t>(cps.size()), start, stop, step));
    std::string out;
    for (int64_t i : idx) AppendUtf8(cps[i], &out);
    return Value::String(std::move(out));
  }
  if (object.is_sequence()) {
    const ValueList& items = object.list();
    ASSIGN_OR_RETURN(std::vector<int64_t> idx, SliceIndices(static_cast<int64_t>(items.size()), start, stop, step));
    RETURN_IF_ERROR(in.CountIterations(static_cast<int64_t>(idx.size())));
    ValueList out;
    out.reserve(idx.size());
    for (int64_t i : idx) out.push_back(items[i]);
    return object.is_tuple() ? Value::Tuple(std::move(out)) : Value::List(std::move(out));
  }
  // jinja2 slices with Python's subscript directly, not through its forgiving getitem.
  if (object.is_dict()) return TypeError("unhashable type: 'slice'");
  if (object.is_object()) return TypeError(Cat("'", object.TypeName(), "' object is not subscriptable"));
  return TypeError(Cat("'", object.TypeName(), "' object is not subscriptable"));
}

absl::StatusOr<Value> CallValue(const Value& callee, CallArgs args, Interpreter& in) {
  if (callee.is_undefined()) return callee.UndefinedError();
  if (!callee.IsCallable()) return TypeError(Cat("'", callee.TypeName(), "' object is not callable"));
  return callee.object()->Call(std::move(args), in);
}

absl::StatusOr<std::string> PercentFormat(std::string_view format, const Value& args) {
  // CPython treats any argument with __getitem__ but a tuple or str (a dict, also a list) as a
  // mapping: it is never "not all converted".
  const bool mapping = args.is_dict() || args.is_list();
  ValueList positional;
  if (args.is_tuple()) positional = args.list();
  else if (!mapping) positional.push_back(args);
  size_t next_arg = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) return TemplateError(ErrorKind::kValue, "incomplete format");
    Value arg;
    bool have_arg = false;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string_view::npos) return TemplateError(ErrorKind::kValue, "incomplete format key");
      if (!args.is_dict()) return TypeError("format requires a mapping");
      const Value* v = args.dict().Find(format.substr(i + 1, close - i - 1));
      if (v == nullptr)
        return TemplateError(ErrorKind::kValue, Cat("format key not found: ", format.substr(i + 1, close - i - 1)));
      arg = *v;
      have_arg = true;
      i = close + 1;
    }
    std::string spec = "%";
    while (i < format.size() && std::string_view("-+ #0").find(format[i]) != std::string_view::npos) spec += format[i++];
    while (i < format.size() && absl::ascii_isdigit(format[i])) spec += format[i++];
    if (i < format.size() && format[i] == '.') {
      spec += format[i++];
      while (i < format.size() && absl::ascii_isdigit(format[i])) spec += format[i++];
    }
    if (i >= format.size()) return TemplateError(ErrorKind::kValue, "incomplete format");
    const char conv = format[i];
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_arg) {
      if (mapping) {
        arg = args;
      } else {
        if (next_arg >= positional.size()) return TypeError("not enough arguments for format string");
        arg = positional[next_arg++];
      }
    }
    char buf[512];
    switch (conv) {
      case 's':
      case 'r': {
        std::string text = conv == 's' ? arg.Str() : arg.Repr();
        std::string width_spec = spec.substr(1);
        if (width_spec.empty()) {
          out += text;
        } else {
          const bool left = width_spec.find('-') != std::string::npos;
          size_t dot = width_spec.find('.');
          int width = std::atoi(width_spec.c_str() + (left ? 1 : 0));
          if (dot != std::string::npos) {
            const int64_t prec = std::atoi(width_spec.c_str() + dot + 1);
            const std::vector<char32_t> cps = DecodeUtf8(text);
            if (static_cast<int64_t>(cps.size()) > prec)
              text = EncodeUtf8(std::vector<char32_t>(cps.begin(), cps.begin() + prec));
          }
          const int64_t pad = width - CodePointCount(text);
          if (pad > 0 && !left) out.append(pad, ' ');
          out += text;
          if (pad > 0 && left) out.append(pad, ' ');
        }
        break;
      }
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
        if (!arg.is_number()) return TypeError(Cat("%", std::string(1, conv), " format: a real number is required, not ", arg.TypeName()));
        const int64_t v = arg.is_float() ? static_cast<int64_t>(arg.float_value()) : arg.int_value();
        const std::string f = spec + "ll" + (conv == 'i' || conv == 'u' ? 'd' : conv);
        std::snprintf(buf, sizeof buf, f.c_str(), static_cast<long long>(v));
        out += buf;
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
        if (!arg.is_number()) return TypeError(Cat("must be real number, not ", arg.TypeName()));
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), arg.float_value());
        out += buf;
        break;
      }
      case 'c': {
        if (arg.is_string() && CodePointCount(arg.str()) == 1) out += arg.str();
        else if (arg.is_integral()) AppendUtf8(static_cast<char32_t>(arg.int_value()), &out);
        else return TypeError("%c requires int or char");
        break;
      }
      default:
        return TemplateError(ErrorKind::kValue, Cat("unsupported format character '", std::string(1, conv), "'"));
    }
  }
  if (!mapping && next_arg < positional.size())
    return TypeError("not all arguments converted during string formatting");
  return out;
}

}  // namespace llm::chat
