// TMA tensor maps for the warpgroup GEMMs (gemm_fp8_wgmma.cu, gemm_w4a16_wgmma.cu): a row-major
// matrix seen as bytes, loaded in boxes of some rows x one 128-byte swizzle span, the layout
// WgmmaDescSwizzle128 (wgmma.cuh) describes. The driver's encoder is reached through the runtime,
// so nothing links against libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "absl/status/status.h"

namespace llm::cuda {

// Bytes a box row spans: one 128-byte swizzle span.
inline constexpr int kTensorMapBoxBytes = 128;

// Whether the driver offers cuTensorMapEncodeTiled (else callers keep another kernel).
bool TensorMapsAvailable();

// `map` := a row-major [rows, row_bytes] byte matrix at `data` (16-byte aligned, row_bytes a
// multiple of 16) in boxes of box_rows x 128 bytes with the 128-byte swizzle; rows past `rows`
// read as zeros. `what` names the caller in errors.
absl::Status EncodeSwizzledRows(CUtensorMap* map, const void* data, int64_t rows, int64_t row_bytes, int box_rows,
                                const char* what);

}  // namespace llm::cuda
