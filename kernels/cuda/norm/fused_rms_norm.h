// An RMSNorm that a linear kernel applies to its input rows itself (the decode GEMVs), instead of
// a norm kernel writing them first: one launch and one dependency wait fewer a norm.
#pragma once

#include <cstdint>

#include "kernels/core/host_device.h"

namespace llm::cuda {

struct FusedRmsNorm {
  const void* weight = nullptr;  // [K] in the activation dtype; null: x is the linear's input as is
  float eps = 0.0f;
  bool active() const { return weight != nullptr; }
};

// The threads a block of the norm kernel's held form (rms_norm.cu) gives one row of `vecs` 16-byte
// chunks, and the chunks each thread holds. A fused norm walks the row as that kernel's threads
// would, so that the sum of squares, and with it every output bit, is the norm kernel's.
LLM_HOST_DEVICE inline int RmsNormHeldThreads(int64_t vecs) {
  const int64_t t = (vecs + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : t > 512 ? 512 : t);
}
LLM_HOST_DEVICE inline int RmsNormHeldChunks(int64_t vecs) {
  const int64_t threads = RmsNormHeldThreads(vecs), chunks = (vecs + threads - 1) / threads;
  return chunks <= 1 ? 1 : chunks <= 2 ? 2 : chunks <= 4 ? 4 : chunks <= 8 ? 8 : 0;  // 0: not held
}

}  // namespace llm::cuda
