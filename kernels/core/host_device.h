// LLM_HOST_DEVICE marks a function that host code and CUDA kernels both call (one formula for
// both sides); outside nvcc it marks nothing.
#pragma once

#if defined(__CUDACC__)
#define LLM_HOST_DEVICE __host__ __device__
#else
#define LLM_HOST_DEVICE
#endif
