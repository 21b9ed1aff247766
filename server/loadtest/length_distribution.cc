#include "server/loadtest/length_distribution.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace llm::loadtest {
namespace {

absl::Status Bad(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad length '", text, "': ", why,
                   " (expected N, uniform:LO:HI, normal:MEAN:STD or lognormal:MEDIAN:SIGMA[:MAX])"));
}

}  // namespace

LengthDistribution LengthDistribution::Fixed(int64_t n) {
  LengthDistribution d;
  d.kind_ = Kind::kFixed;
  d.a_ = static_cast<double>(n);
  d.max_ = n;
  return d;
}

absl::StatusOr<LengthDistribution> LengthDistribution::Parse(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  std::vector<double> v;
  for (size_t i = 1; i < parts.size(); ++i) {
    double x;
    if (!absl::SimpleAtod(parts[i], &x) || !std::isfinite(x))
      return Bad(text, absl::StrCat("'", parts[i], "' is not a number"));
    v.push_back(x);
  }
  LengthDistribution d;
  const std::string& kind = parts[0];
  if (parts.size() == 1) {
    int64_t n;
    if (!absl::SimpleAtoi(kind, &n) || n < 1) return Bad(text, "a fixed length is a positive integer");
    return Fixed(n);
  }
  if (kind == "uniform") {
    if (v.size() != 2 || v[0] < 1 || v[1] < v[0] || v[0] != std::floor(v[0]) || v[1] != std::floor(v[1]))
      return Bad(text, "uniform needs integers 1 <= LO <= HI");
    d.kind_ = Kind::kUniform;
    d.a_ = v[0];
    d.b_ = v[1];
    d.max_ = static_cast<int64_t>(v[1]);
  } else if (kind == "normal") {
    if (v.size() != 2 || v[0] < 1 || v[1] < 0) return Bad(text, "normal needs MEAN >= 1 and STD >= 0");
    d.kind_ = Kind::kNormal;
    d.a_ = v[0];
    d.b_ = v[1];
    d.max_ = static_cast<int64_t>(std::llround(v[0] + 4 * v[1]));
  } else if (kind == "lognormal") {
    if (v.size() < 2 || v.size() > 3 || v[0] < 1 || v[1] < 0 || (v.size() == 3 && v[2] < 1))
      return Bad(text, "lognormal needs MEDIAN >= 1, SIGMA >= 0 and MAX >= 1");
    d.kind_ = Kind::kLogNormal;
    d.a_ = v[0];
    d.b_ = v[1];
    d.max_ = static_cast<int64_t>(std::llround(v.size() == 3 ? v[2] : v[0] * 16));
  } else {
    return Bad(text, absl::StrCat("unknown distribution '", kind, "'"));
  }
  return d;
}

int64_t LengthDistribution::Sample(std::mt19937_64& rng) const {
  double x = a_;
  switch (kind_) {
    case Kind::kFixed:
      return max_;
    case Kind::kUniform:
      return std::uniform_int_distribution<int64_t>(static_cast<int64_t>(a_), static_cast<int64_t>(b_))(rng);
    case Kind::kNormal:
      x = std::normal_distribution<double>(a_, b_)(rng);
      break;
    case Kind::kLogNormal:
      x = std::lognormal_distribution<double>(std::log(a_), b_)(rng);
      break;
  }
  return std::clamp<int64_t>(std::llround(x), 1, max_);
}

int64_t LengthDistribution::Max() const { return max_; }

double LengthDistribution::Mean() const {
  switch (kind_) {
    case Kind::kFixed:
    case Kind::kNormal:
      return a_;
    case Kind::kUniform:
      return (a_ + b_) / 2;
    case Kind::kLogNormal:
      return std::min(a_ * std::exp(b_ * b_ / 2), static_cast<double>(max_));
  }
  return a_;
}

std::string LengthDistribution::ToString() const {
  switch (kind_) {
    case Kind::kFixed:
      return absl::StrCat(max_);
    case Kind::kUniform:
      return absl::StrCat("uniform:", a_, ":", b_);
    case Kind::kNormal:
      return absl::StrCat("normal:", a_, ":", b_);
    case Kind::kLogNormal:
      return absl::StrCat("lognormal:", a_, ":", b_, ":", max_);
  }
  return "";
}

}  // namespace llm::loadtest
