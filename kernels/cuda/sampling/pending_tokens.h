// Overlapped scheduling: the host plans step N+1 before it knows step N's samples, writing
// -(row + 1) for "the token step N sampled in that row". This kernel replaces those placeholders
// with the samples, on the device, before step N+1's embedding reads its ids.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/common/stream.h"

namespace llm::cuda {

// ids[i] < 0 becomes sampled[-ids[i] - 1] (rows < num_sampled; others become 0 rather than read
// out of bounds: the host validated them). ids >= 0 stay.
absl::Status LaunchResolvePendingTokens(int32_t* ids, int64_t n, const int32_t* sampled, int64_t num_sampled,
                                        Stream stream);

}  // namespace llm::cuda
