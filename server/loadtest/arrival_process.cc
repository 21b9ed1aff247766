#include "server/loadtest/arrival_process.h"

#include <cmath>

namespace llm::loadtest {

ArrivalProcess::ArrivalProcess(double rate, double burstiness, uint64_t seed)
    : rate_(rate),
      burstiness_(burstiness),
      rng_(seed),
      // Shape k and scale 1/(rate k): mean k * scale = 1/rate, variance 1/(k rate^2).
      gamma_(burstiness, std::isinf(rate) ? 1.0 : 1.0 / (rate * burstiness)) {}

absl::Duration ArrivalProcess::NextGap() {
  if (std::isinf(rate_)) return absl::ZeroDuration();
  return absl::Seconds(gamma_(rng_));
}

}  // namespace llm::loadtest
