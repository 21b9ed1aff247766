// Internal: the per-token (or static) FP8 quantization of one row that a row kernel has just
// written, fused into that kernel's tail (RMSNorm, SiLU-and-mul) so that a W8A8 linear finds its
// input quantized instead of reading the 16-bit row again. Exactly the codes and scale of the
// stand-alone quantizer (fp8_quantize.cu): the same amax over the stored (rounded) values, the
// same Fp8ScaleForAmax, the same division and rounding.
#pragma once

#include <cstdint>

#include "kernels/core/fp8_scale.h"
#include "kernels/cuda/common/device_utils.cuh"
#include "kernels/cuda/common/fp8.cuh"
#include "kernels/cuda/quant/fp8_quantize.h"

namespace llm::cuda {

// kVec code bytes of one 16-byte chunk of values, each divided by the scale (as fp8_quantize.cu).
template <typename T>
__device__ __forceinline__ void StoreFp8Chunk(uint8_t* codes, const Vec16<T>& v, const Fp8ScaleDivisor& divide) {
  constexpr int kVec = Vec16<T>::kVec;
  uint8_t b[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) b[e] = FloatToFp8(divide(ToFloat(v.v[e])));
  if constexpr (kVec == 8) {
    uint2 out;
    out.x = b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
    out.y = b[4] | b[5] << 8 | b[6] << 16 | static_cast<uint32_t>(b[7]) << 24;
    *reinterpret_cast<uint2*>(codes) = out;
  } else {
    static_assert(kVec == 4);
    *reinterpret_cast<uint32_t*>(codes) = b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
  }
}

// Quantizes `row` (row `row_index`, dim elements, just stored by this block: each thread re-reads
// only its own elements, in the walk `for (c = threadIdx.x; c < dim / kVec (or dim); c +=
// blockDim.x)` of the store, so no barrier is needed) into q's codes and scale. kVec16 writes
// kVec code bytes a chunk (dim % kVec == 0, 8-byte aligned codes). Every thread of the block
// calls it (the amax is block-wide); `scratch` holds 32 floats of shared memory, free to reuse.
template <typename T, bool kVec16>
__device__ __forceinline__ void QuantizeStoredRowFp8(const T* row, int64_t row_index, int64_t dim,
                                                     const Fp8RowOutput& q, float* scratch) {
  constexpr int kVec = kVec16 ? Vec16<T>::kVec : 1;
  uint8_t* codes = q.codes + row_index * dim;
  const float* static_scale = q.static_scale;
  float s;
  if (static_scale != nullptr) {
    s = *static_scale;
  } else {
    float amax = 0.0f;
    for (int64_t c = threadIdx.x; c < dim / kVec; c += blockDim.x) {
      if constexpr (kVec16) {
        const Vec16<T> v = LoadVec(row + c * kVec);
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(ToFloat(v.v[e])));
      } else {
        amax = fmaxf(amax, fabsf(ToFloat(row[c])));
      }
    }
    s = Fp8ScaleForAmax(BlockMax(amax, scratch));
    if (threadIdx.x == 0) q.scales[row_index] = s;
  }
  const Fp8ScaleDivisor divide(s, static_scale == nullptr);
  for (int64_t c = threadIdx.x; c < dim / kVec; c += blockDim.x) {
    if constexpr (kVec16) {
      StoreFp8Chunk(codes + c * kVec, LoadVec(row + c * kVec), divide);
    } else {
      codes[c] = FloatToFp8(divide(ToFloat(row[c])));
    }
  }
}

// The same from values the threads still hold in registers (no re-read of the stored row): a
// thread's v[j] is the row's 16-byte chunk threadIdx.x + j * blockDim.x, those at or past
// dim / kVec unused (dim % kVec == 0, 8-byte aligned codes). Every thread of the block calls it.
template <typename T, int kChunks>
__device__ __forceinline__ void QuantizeHeldRowFp8(const Vec16<T> (&v)[kChunks], int64_t row_index, int64_t dim,
                                                   const Fp8RowOutput& q, float* scratch) {
  constexpr int kVec = Vec16<T>::kVec;
  const int64_t vecs = dim / kVec;
  uint8_t* codes = q.codes + row_index * dim;
  float s;
  if (q.static_scale != nullptr) {
    s = *q.static_scale;
  } else {
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kChunks; ++j)
      if (threadIdx.x + j * blockDim.x < vecs)
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax = fmaxf(amax, fabsf(ToFloat(v[j].v[e])));
    s = Fp8ScaleForAmax(BlockMax(amax, scratch));
    if (threadIdx.x == 0) q.scales[row_index] = s;
  }
  const Fp8ScaleDivisor divide(s, q.static_scale == nullptr);
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int64_t c = threadIdx.x + j * blockDim.x;
    if (c < vecs) StoreFp8Chunk(codes + c * kVec, v[j], divide);
  }
}

}  // namespace llm::cuda
