#include "engine/model/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "engine/model/json_reader.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

constexpr size_t kLengthBytes = 8;
// The reference implementation refuses headers above 100 MB; a larger length means corruption,
// and believing it would cost memory in proportion.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

struct SafetensorsDType {
  std::string_view name;
  size_t size;
  std::optional<DType> dtype;  // nullopt: valid safetensors, but the engine has no such type
};

constexpr SafetensorsDType kDTypes[] = {
    {"F32", 4, DType::kF32},      {"F16", 2, DType::kF16},      {"BF16", 2, DType::kBF16},
    {"I32", 4, DType::kI32},      {"I64", 8, DType::kI64},      {"U8", 1, DType::kU8},
    {"F64", 8, std::nullopt},     {"I8", 1, std::nullopt},      {"I16", 2, std::nullopt},
    {"U16", 2, std::nullopt},     {"U32", 4, std::nullopt},     {"U64", 8, std::nullopt},
    {"BOOL", 1, std::nullopt},    {"F8_E4M3", 1, DType::kF8E4M3}, {"F8_E5M2", 1, std::nullopt},
    {"F8_E8M0", 1, std::nullopt}, {"C64", 8, std::nullopt},
};

const SafetensorsDType* LookupDType(std::string_view name) {
  for (const SafetensorsDType& t : kDTypes) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

uint64_t ReadLittleEndian64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = kLengthBytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  TensorRecord r;
  r.shape = shape;
  return r.ShapeString();
}

// The data section and what error messages call the file.
struct FileContext {
  std::string_view file_name;
  std::string label;
  const uint8_t* data_section;
  uint64_t data_size;

  absl::Status FileError(std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", std::string(what)));
  }
  absl::Status TensorError(const std::string& tensor, std::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(label, ": tensor '", tensor, "' ", std::string(what)));
  }
};

absl::StatusOr<std::vector<int64_t>> ParseShape(const std::string& name, const nlohmann::json& entry,
                                                const FileContext& ctx, uint64_t* numel) {
  auto it = entry.find("shape");
  if (it == entry.end() || !it->is_array()) {
    return ctx.TensorError(name, "has no 'shape' list of dimensions");
  }
  std::vector<int64_t> shape;
  *numel = 1;
  for (const nlohmann::json& dim : *it) {
    std::optional<int64_t> d = JsonToInt64(dim);
    if (!d || *d < 0) {
      return ctx.TensorError(name, absl::StrCat("has an invalid dimension ", DescribeJson(dim),
                                                " in 'shape' ", DescribeJson(*it)));
    }
    if (__builtin_mul_overflow(*numel, static_cast<uint64_t>(*d), numel) ||
        *numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return ctx.TensorError(name, absl::StrCat("has a shape whose element count overflows: ",
                                                DescribeJson(*it)));
    }
    shape.push_back(*d);
  }
  return shape;
}

absl::Status ParseOffsets(const std::string& name, const nlohmann::json& entry, const FileContext& ctx,
                          uint64_t* begin, uint64_t* end) {
  auto it = entry.find("data_offsets");
  std::optional<int64_t> b, e;
  if (it != entry.end() && it->is_array() && it->size() == 2) {
    b = JsonToInt64((*it)[0]);
    e = JsonToInt64((*it)[1]);
  }
  if (!b || !e || *b < 0 || *e < 0) {
    return ctx.TensorError(name, absl::StrCat("needs 'data_offsets' as two non-negative integers, got ",
                                              it == entry.end() ? "nothing" : DescribeJson(*it)));
  }
  *begin = static_cast<uint64_t>(*b);
  *end = static_cast<uint64_t>(*e);
  if (*begin > *end) {
    return ctx.TensorError(name, absl::StrCat("has data_offsets [", *begin, ", ", *end, "] with begin > end"));
  }
  if (*end > ctx.data_size) {
    return ctx.TensorError(name, absl::StrCat("has data_offsets [", *begin, ", ", *end,
                                              "] beyond the data section of ", ctx.data_size,
                                              " bytes (file truncated?)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const nlohmann::json& entry,
                                            const FileContext& ctx) {
  if (!entry.is_object()) {
    return ctx.TensorError(name, absl::StrCat("must map to an object with dtype, shape and data_offsets, got ",
                                              DescribeJson(entry)));
  }
  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) {
    return ctx.TensorError(name, "has no 'dtype' string");
  }
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  uint64_t numel = 0;
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ParseShape(name, entry, ctx, &numel));
  uint64_t begin = 0, end = 0;
  RETURN_IF_ERROR(ParseOffsets(name, entry, ctx, &begin, &end));

  SafetensorsEntry out;
  const SafetensorsDType* type = LookupDType(dtype_name);
  if (type == nullptr) {
    // Without an element size the byte count cannot be checked, but the offsets were: reading
    // [begin, end) stays inside the mapping.
    out.unsupported = absl::UnimplementedError(
        absl::StrCat(ctx.label, ": tensor '", name, "' has unknown dtype '", dtype_name, "'"));
  } else {
    uint64_t expected = 0;
    const bool overflow = __builtin_mul_overflow(numel, uint64_t{type->size}, &expected);
    if (overflow || expected != end - begin) {
      return ctx.TensorError(
          name, absl::StrCat("has ", end - begin, " bytes (data_offsets [", begin, ", ", end, "]) but shape ",
                             ShapeToString(shape), " of ", dtype_name, " needs ",
                             overflow ? "more than 2^64" : absl::StrCat(expected), " (", numel,
                             " elements x ", type->size, " bytes)"));
    }
    if (type->dtype) {
      out.record.dtype = *type->dtype;
    } else {
      out.unsupported = absl::UnimplementedError(
          absl::StrCat(ctx.label, ": tensor '", name, "' has dtype ", dtype_name,
                       ", which is not supported (supported: F32, F16, BF16, I32, I64, U8)"));
    }
  }
  out.record.name = name;
  out.record.file = std::string(ctx.file_name);
  out.record.shape = std::move(shape);
  out.record.data = ctx.data_section + begin;
  out.record.bytes = end - begin;
  return out;
}

// Two tensors sharing bytes would alias each other's weights; the format forbids it.
absl::Status CheckNoOverlap(const std::vector<SafetensorsEntry>& entries, const FileContext& ctx) {
  std::vector<const TensorRecord*> sorted;
  for (const SafetensorsEntry& e : entries) {
    if (e.record.bytes > 0) sorted.push_back(&e.record);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorRecord* a, const TensorRecord* b) { return a->data < b->data; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    const TensorRecord& prev = *sorted[i - 1];
    const TensorRecord& cur = *sorted[i];
    const uint8_t* prev_end = static_cast<const uint8_t*>(prev.data) + prev.bytes;
    if (static_cast<const uint8_t*>(cur.data) < prev_end) {
      return ctx.FileError(absl::StrCat("tensors '", prev.name, "' and '", cur.name, "' overlap"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<SafetensorsEntry>> ParseSafetensors(const uint8_t* data, size_t size,
                                                               std::string_view file_name,
                                                               std::string_view label) {
  FileContext ctx{file_name, std::string(label), nullptr, 0};
  if (size < kLengthBytes) {
    return ctx.FileError(absl::StrCat("file is ", size, " bytes, too short for the 8-byte safetensors "
                                      "header length (truncated?)"));
  }
  const uint64_t header_bytes = ReadLittleEndian64(data);
  if (header_bytes > size - kLengthBytes) {
    return ctx.FileError(absl::StrCat("header length ", header_bytes, " exceeds the ", size - kLengthBytes,
                                      " bytes after the length field (truncated or not safetensors?)"));
  }
  if (header_bytes > kMaxHeaderBytes) {
    return ctx.FileError(absl::StrCat("header length ", header_bytes, " exceeds the ", kMaxHeaderBytes,
                                      "-byte limit (not safetensors?)"));
  }
  ctx.data_section = data + kLengthBytes + header_bytes;
  ctx.data_size = size - kLengthBytes - header_bytes;

  const std::string_view header_text(reinterpret_cast<const char*>(data + kLengthBytes), header_bytes);
  ASSIGN_OR_RETURN(nlohmann::json header, ParseJsonText(header_text, absl::StrCat(ctx.label, " (header)")));
  if (!header.is_object()) {
    return ctx.FileError(absl::StrCat("header must be a JSON object, got ", DescribeJson(header)));
  }

  const auto& tensors = header.get_ref<const nlohmann::json::object_t&>();
  std::vector<SafetensorsEntry> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, entry] : tensors) {
    if (name == "__metadata__") continue;  // free-form strings ("format": "pt"); nothing to check
    ASSIGN_OR_RETURN(SafetensorsEntry parsed, ParseEntry(name, entry, ctx));
    entries.push_back(std::move(parsed));
  }
  RETURN_IF_ERROR(CheckNoOverlap(entries, ctx));
  return entries;
}

}  // namespace llm
