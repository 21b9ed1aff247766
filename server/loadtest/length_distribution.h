// LengthDistribution: how many tokens a synthetic prompt or output has. Parsed from a flag value:
//   "128"                 fixed
//   "uniform:LO:HI"       uniform integers in [LO, HI]
//   "normal:MEAN:STD"     rounded normal, clipped to [1, MEAN + 4 STD]
//   "lognormal:MEDIAN:SIGMA[:MAX]"  rounded log-normal (long-tailed, like chat data), clipped to
//                         [1, MAX] (default MEDIAN * 16)
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"

namespace llm::loadtest {

class LengthDistribution {
 public:
  enum class Kind { kFixed, kUniform, kNormal, kLogNormal };

  static absl::StatusOr<LengthDistribution> Parse(const std::string& text);
  static LengthDistribution Fixed(int64_t n);

  int64_t Sample(std::mt19937_64& rng) const;
  // The largest value Sample can return.
  int64_t Max() const;
  double Mean() const;  // approximate for the clipped kinds
  std::string ToString() const;
  Kind kind() const { return kind_; }

 private:
  Kind kind_ = Kind::kFixed;
  double a_ = 0;  // fixed value, LO, MEAN or MEDIAN
  double b_ = 0;  // HI, STD or SIGMA
  int64_t max_ = 0;
};

}  // namespace llm::loadtest
