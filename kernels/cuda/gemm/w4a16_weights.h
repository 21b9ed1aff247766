// Device pointers of an int4 (W4A16) weight in the repacked layout of engine/core/storage_format.h
// (the kernels' view: w4a16_common.cuh).
#pragma once

#include <cstdint>

namespace llm::cuda {

struct W4A16Weights {
  const uint8_t* codes = nullptr;        // [n, kp / 2] bytes in 16-row tiles of 4-chunk units
  const void* scales = nullptr;          // f16 [n, groups]
  const uint8_t* zeros = nullptr;        // [n, groups], or null: 8
  const int32_t* chunk_group = nullptr;  // [kp / 32]
  int64_t groups = 0;
  // Chunks a group when chunk c is in group c / group_chunks for every c (Int4GroupChunks in
  // engine/core/int4_layout.h); 0 otherwise. Lets a kernel compute groups instead of reading
  // chunk_group.
  int64_t group_chunks = 0;
};

}  // namespace llm::cuda
