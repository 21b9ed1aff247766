// Row gathers: the embedding lookup (vocab-parallel shard aware) and GatherRows.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/core/dtype.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

// out[t, :] = table[ids[t] - vocab_offset, :], zeros where that row is outside [0, table_rows).
// table [table_rows, dim], ids int32 [num_ids], out [num_ids, dim].
absl::Status LaunchEmbedding(DType dtype, const void* table, int64_t table_rows, int64_t dim, const int32_t* ids,
                             int64_t num_ids, int64_t vocab_offset, void* out, Stream stream);

// out[i, :] = x[rows[i], :]; x [x_rows, width], rows int32 [num_rows]. A row index outside
// [0, x_rows) yields a zero row (the host cannot check device-resident indices without a sync).
absl::Status LaunchGatherRows(DType dtype, const void* x, int64_t x_rows, int64_t width, const int32_t* rows,
                              int64_t num_rows, void* out, Stream stream);

}  // namespace llm::cuda
