// ArrivalProcess: inter-arrival gaps of an open-loop load. Gaps are gamma-distributed with shape
// `burstiness` and mean 1/rate: burstiness 1 is a Poisson process (exponential gaps), below 1
// arrivals come in bursts (coefficient of variation 1/sqrt(burstiness)), above 1 they are more
// regular. An infinite rate sends every request at once.
#pragma once

#include <random>

#include "absl/time/time.h"

namespace llm::loadtest {

class ArrivalProcess {
 public:
  // rate in requests/s (> 0, may be infinite); burstiness > 0.
  ArrivalProcess(double rate, double burstiness, uint64_t seed);

  absl::Duration NextGap();
  double rate() const { return rate_; }
  double burstiness() const { return burstiness_; }

 private:
  double rate_;
  double burstiness_;
  std::mt19937_64 rng_;
  std::gamma_distribution<double> gamma_;
};

}  // namespace llm::loadtest
