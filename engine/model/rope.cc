#include "engine/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace llm {
namespace {

// Hugging Face computes base ** (2i / dim) in float32; doing it in double and rounding once is
// within an ulp of that.
std::vector<double> DefaultInvFreq(double base, int dim) {
  std::vector<double> inv(dim / 2);
  for (int i = 0; i < dim / 2; ++i) inv[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / dim);
  return inv;
}

void ApplyLlama3(const RopeScaling& s, std::vector<double>& inv) {
  const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
  const double low_wavelen = old_ctx / s.low_freq_factor;
  const double high_wavelen = old_ctx / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_wavelen) {
      f = f / s.factor;  // low frequencies: interpolate fully
    } else if (wavelen >= high_wavelen) {  // medium: blend
      const double smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  }
}

void ApplyYarn(const RopeScaling& s, double base, int dim, int64_t max_pos, std::vector<double>& inv,
               float* attention_scaling) {
  const double orig = s.original_max_position_embeddings > 0
                          ? static_cast<double>(s.original_max_position_embeddings)
                          : static_cast<double>(max_pos) / s.factor;
  auto correction_dim = [&](double rotations) {
    return dim * std::log(orig / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  double low = std::max(0.0, std::floor(correction_dim(s.beta_fast)));
  double high = std::min(static_cast<double>(dim - 1), std::ceil(correction_dim(s.beta_slow)));
  if (low == high) high += 0.001;
  for (int i = 0; i < dim / 2; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const double extrapolated = inv[i];
    const double interpolated = inv[i] / s.factor;
    inv[i] = interpolated * (1.0 - extrapolation_weight) + extrapolated * extrapolation_weight;
  }
  *attention_scaling = static_cast<float>(
      s.attention_factor.value_or(s.factor > 1.0 ? 0.1 * std::log(s.factor) + 1.0 : 1.0));
}

}  // namespace

absl::StatusOr<RopeTable> ComputeRopeTable(const ModelConfig& c) {
  RopeTable t;
  t.rotary_dim = static_cast<int>(c.head_dim * c.partial_rotary_factor);
  t.rotary_dim -= t.rotary_dim % 2;
  if (t.rotary_dim <= 0) return absl::InvalidArgumentError("rotary dimension must be positive");
  std::vector<double> inv = DefaultInvFreq(c.rope_theta, t.rotary_dim);
  const RopeScaling& s = c.rope_scaling;
  switch (s.type) {
    case RopeType::kDefault:
      break;
    case RopeType::kLinear:
      for (double& f : inv) f /= s.factor;
      break;
    case RopeType::kLlama3:
      if (s.original_max_position_embeddings <= 0)
        return absl::InvalidArgumentError("llama3 rope scaling needs original_max_position_embeddings");
      ApplyLlama3(s, inv);
      break;
    case RopeType::kYarn:
      ApplyYarn(s, c.rope_theta, t.rotary_dim, c.max_position_embeddings, inv, &t.attention_scaling);
      break;
    case RopeType::kDynamic:
      return absl::UnimplementedError("dynamic NTK rope scaling is not supported");
  }
  t.inv_freq.assign(inv.begin(), inv.end());
  return t;
}

}  // namespace llm
