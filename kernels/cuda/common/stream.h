// The stream and event types of the launchers' public headers, without pulling CUDA headers into them.
#pragma once

struct CUstream_st;
struct CUevent_st;

namespace llm::cuda {
using Stream = CUstream_st*;  // == cudaStream_t
using Event = CUevent_st*;    // == cudaEvent_t
}  // namespace llm::cuda
