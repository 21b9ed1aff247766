// Parsing and validation of one safetensors file against the bytes of its mapping.
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"<tensor>": {"dtype": "BF16", "shape": [r, c], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {...}}
// then the data section, to which the offsets are relative. Everything that could later make a
// reader leave the mapping is checked here, once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/model/checkpoint.h"

namespace llm {

struct SafetensorsEntry {
  TensorRecord record;
  // Non-OK when the dtype has no llm::DType (F64, F8_E5M2, or a name this parser does not know):
  // the tensor is kept, bounds-checked, so that an unusual extra tensor does not block loading,
  // and this error is returned when someone looks it up.
  absl::Status unsupported;
};

// `data`/`size`: the whole file. `file_name` goes into each record, `label` (usually the full
// path) into error messages. Errors are InvalidArgument naming `label` and, where one is at fault,
// the tensor.
absl::StatusOr<std::vector<SafetensorsEntry>> ParseSafetensors(const uint8_t* data, size_t size,
                                                               std::string_view file_name,
                                                               std::string_view label);

}  // namespace llm
