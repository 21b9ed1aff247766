// The stream type of the launchers' public headers, without pulling CUDA headers into them.
#pragma once

struct CUstream_st;

namespace llm::cuda {
using Stream = CUstream_st*;  // == cudaStream_t
}  // namespace llm::cuda
