// Device-side FP8 E4M3 conversions shared by the FP8 kernels (GEMV, activation quantization, KV
// cache writes and reads). Decoding goes through the hardware's e4m3x2 -> f16x2 conversion (exact:
// every E4M3 value is a half); encoding rounds to nearest even and saturates at +-448
// (__NV_SATFINITE), as the host's FloatToFp8E4M3 does, so the CPU oracle's emulation quantizes
// exactly alike.
#pragma once

#include <cuda_fp8.h>

#include "kernels/cuda/common/device_utils.cuh"

namespace llm::cuda {

__device__ __forceinline__ float2 Fp8x2ToFloat2(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  return __half22float2(*reinterpret_cast<const __half2*>(&h));
}

// Two E4M3 bytes (the lower in the low half) as an f16 pair, exactly.
__device__ __forceinline__ uint32_t Fp8x2ToHalf2Bits(uint32_t two_bytes) {
  uint32_t h;
  asm("{\n .reg .b16 lo;\n cvt.u16.u32 lo, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}\n" : "=r"(h) : "r"(two_bytes));
  return h;
}

// Four E4M3 values packed in a word (the lowest byte first) into floats.
__device__ __forceinline__ void Fp8x4ToFloat(uint32_t v, float* out) {
  const float2 lo = Fp8x2ToFloat2(static_cast<uint16_t>(v & 0xffffu));
  const float2 hi = Fp8x2ToFloat2(static_cast<uint16_t>(v >> 16));
  out[0] = lo.x;
  out[1] = lo.y;
  out[2] = hi.x;
  out[3] = hi.y;
}

// Sixteen E4M3 values (one 16-byte vector) into floats.
__device__ __forceinline__ void Fp8x16ToFloat(const uint4& v, float (&out)[16]) {
  Fp8x4ToFloat(v.x, out);
  Fp8x4ToFloat(v.y, out + 4);
  Fp8x4ToFloat(v.z, out + 8);
  Fp8x4ToFloat(v.w, out + 12);
}

__device__ __forceinline__ uint8_t FloatToFp8(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

// x / s for the values a quantizer divides by their scale, bit for bit what the division gives
// (the CPU oracle's quantizer divides, and the GPU's codes must equal its emulation's). A dynamic
// scale (Fp8ScaleForAmax of the values' own amax) bounds every quotient by 448, and then three
// instructions do what the IEEE division does in ~10: q = x r with r = 1/s rounded once, then one
// correction by the residual x - q s, which an FMA computes exactly (Markstein's theorem: with r
// the correctly rounded reciprocal, q + (x - q s) r rounds to x / s unless the quotient overflows
// or is subnormal, and a subnormal quotient is +-0 in E4M3 either way; cuda_fp8_test checks every
// bf16 and fp16 input against the CPU's division: on an H100 all agreed but -0, handled below).
// A static (checkpoint) scale bounds nothing: divided.
class Fp8ScaleDivisor {
 public:
  __device__ __forceinline__ Fp8ScaleDivisor(float s, bool dynamic) : s_(s), r_(0.0f), dynamic_(dynamic) {
    if (dynamic) r_ = 1.0f / s;  // an IEEE division (nvcc's default -prec-div): correctly rounded
  }
  __device__ __forceinline__ float operator()(float x) const {
    if (!dynamic_) return x / s_;
    const float q = __fmul_rn(x, r_);
    const float d = __fmaf_rn(__fmaf_rn(-q, s_, x), r_, q);
    return x == 0.0f ? x : d;  // -0: the correction's sum (-0) + (+0) is +0; the division keeps -0
  }

 private:
  float s_, r_;
  bool dynamic_;
};

}  // namespace llm::cuda

namespace llm::cuda {

// One E4M3 element as a type of its own, so that the generic elementwise kernels (conversion,
// random fill) can write FP8 through FromFloat.
struct Fp8E4M3Byte {
  uint8_t bits;
};
__device__ __forceinline__ float ToFloat(Fp8E4M3Byte x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.bits, __NV_E4M3)));
}
template <>
__device__ __forceinline__ Fp8E4M3Byte FromFloat<Fp8E4M3Byte>(float x) {
  return {FloatToFp8(x)};
}

}  // namespace llm::cuda

namespace llm::cuda {

__device__ __forceinline__ float Fp8ToFloat(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(v, __NV_E4M3)));
}

}  // namespace llm::cuda
