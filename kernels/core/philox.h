// Counter-based random numbers (Philox-4x32-10), identical on host and device. Sampling draws
// uniform(seed, step): the value depends only on the request's seed and how many tokens it has
// generated, never on batch composition, so a preempted and resumed request samples the same
// tokens, and the same seed always gives the same output.
#pragma once

#include <cstdint>

#include "kernels/core/host_device.h"

namespace llm {

struct Philox4x32 {
  uint32_t v[4];
};

LLM_HOST_DEVICE inline uint32_t MulHiLo(uint32_t a, uint32_t b, uint32_t* hi) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  return static_cast<uint32_t>(p);
}

// Ten rounds of Philox-4x32 on counter `ctr` with key `key` (Salmon et al., SC'11).
LLM_HOST_DEVICE inline Philox4x32 Philox(Philox4x32 ctr, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    const uint32_t lo0 = MulHiLo(kM0, ctr.v[0], &hi0);
    const uint32_t lo1 = MulHiLo(kM1, ctr.v[2], &hi1);
    ctr = Philox4x32{{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    key0 += kW0;
    key1 += kW1;
  }
  return ctr;
}

// A uniform float in [0, 1) for (seed, step, lane).
LLM_HOST_DEVICE inline float UniformFloat(uint64_t seed, uint64_t step, uint32_t lane = 0) {
  const Philox4x32 ctr{{static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), lane, 0x6c6c6d00u}};
  const Philox4x32 r = Philox(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(r.v[0] >> 8) * (1.0f / 16777216.0f);  // 24 random bits
}

}  // namespace llm
