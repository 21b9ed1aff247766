// The one formula for a dynamic FP8 (E4M3) scale, shared by the CPU oracle and the CUDA kernels,
// so that an emulation of the GPU's activation quantization rounds exactly as the GPU does.
// A value x is stored as e4m3(x / scale) and read back as e4m3 * scale.
#pragma once

#include "kernels/core/host_device.h"

namespace llm {

// The smallest scale a dynamic quantizer uses: an all-zero row would otherwise divide by zero,
// and a tiny one push values past E4M3's range. vLLM and TensorRT-LLM use the same floor.
inline constexpr float kFp8MinScale = 1.0f / (448.0f * 512.0f);

// The scale that maps |x| <= amax onto E4M3's range [-448, 448].
LLM_HOST_DEVICE inline float Fp8ScaleForAmax(float amax) {
  const float s = amax / 448.0f;
  return s > kFp8MinScale ? s : kFp8MinScale;
}

}  // namespace llm
