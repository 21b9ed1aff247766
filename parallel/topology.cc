#include "parallel/topology.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace llm {

absl::StatusOr<Topology> Topology::Create(int world_size, int rank, int local_rank, int local_size, int tp,
                                          int pp) {
  if (tp < 1 || pp < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor-parallel size (", tp, ") and pipeline-parallel size (", pp, ") must both be >= 1"));
  }
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world size must be >= 1, got ", world_size));
  }
  if (static_cast<long long>(tp) * pp != world_size) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size, " != tp ", tp, " x pp ", pp,
                                                   " (launch exactly tp*pp ranks, e.g. mpirun -np ",
                                                   static_cast<long long>(tp) * pp, ")"));
  }
  if (rank < 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " out of range [0, ", world_size, ")"));
  }
  if (local_size < 1 || local_size > world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("local size ", local_size, " out of range [1, ", world_size, "]"));
  }
  if (local_rank < 0 || local_rank >= local_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("local rank ", local_rank, " out of range [0, ", local_size, ")"));
  }
  return Topology(world_size, rank, local_rank, local_size, tp, pp);
}

Topology Topology::Single() { return Topology(1, 0, 0, 1, 1, 1); }

std::vector<int> Topology::TpGroupRanks() const {
  std::vector<int> ranks;
  ranks.reserve(tp_);
  for (int t = 0; t < tp_; ++t) ranks.push_back(RankAt(pp_stage(), t));
  return ranks;
}

std::vector<int> Topology::PpGroupRanks() const {
  std::vector<int> ranks;
  ranks.reserve(pp_);
  for (int s = 0; s < pp_; ++s) ranks.push_back(RankAt(s, tp_rank()));
  return ranks;
}

std::optional<int> Topology::PrevStageRank() const {
  if (is_first_stage()) return std::nullopt;
  return RankAt(pp_stage() - 1, tp_rank());
}

std::optional<int> Topology::NextStageRank() const {
  if (is_last_stage()) return std::nullopt;
  return RankAt(pp_stage() + 1, tp_rank());
}

std::string Topology::ToString() const {
  return absl::StrCat("rank ", rank_, "/", world_size_, " (local ", local_rank_, "/", local_size_,
                      ", device ", device(), "): tp ", tp_rank(), "/", tp_, ", pp stage ", pp_stage(), "/",
                      pp_);
}

absl::StatusOr<ShardedDims> ShardModel(const ModelDims& d, int tp, int pp) {
  if (tp < 1 || pp < 1) {
    return absl::InvalidArgumentError(absl::StrCat("tp (", tp, ") and pp (", pp, ") must be >= 1"));
  }
  if (d.num_heads < 1 || d.num_kv_heads < 1 || d.intermediate_size < 1 || d.vocab_size < 1 ||
      d.num_layers < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model dims must be positive: heads ", d.num_heads, ", kv heads ", d.num_kv_heads, ", intermediate ",
        d.intermediate_size, ", vocab ", d.vocab_size, ", layers ", d.num_layers));
  }
  if (d.num_heads % d.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_heads ", d.num_heads, " is not a multiple of num_kv_heads ", d.num_kv_heads));
  }
  if (d.num_heads % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_heads ", d.num_heads, " is not divisible by tensor-parallel size ", tp));
  }
  if (d.intermediate_size % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat("intermediate_size ", d.intermediate_size,
                                                   " is not divisible by tensor-parallel size ", tp));
  }
  ShardedDims s;
  s.heads_per_rank = d.num_heads / tp;
  if (d.num_kv_heads >= tp) {
    if (d.num_kv_heads % tp != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_kv_heads ", d.num_kv_heads, " is not divisible by tensor-parallel size ", tp));
    }
    s.kv_heads_per_rank = d.num_kv_heads / tp;
    s.kv_replication = 1;
  } else {
    if (tp % d.num_kv_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor-parallel size ", tp, " is not a multiple of num_kv_heads ", d.num_kv_heads,
                       " (fewer KV heads than TP ranks are replicated, which needs tp % kv_heads == 0)"));
    }
    s.kv_heads_per_rank = 1;
    s.kv_replication = tp / d.num_kv_heads;
  }
  s.intermediate_per_rank = d.intermediate_size / tp;
  s.vocab_per_rank = (d.vocab_size + tp - 1) / tp;
  s.padded_vocab_size = s.vocab_per_rank * tp;
  if (d.num_layers < pp) {
    return absl::InvalidArgumentError(absl::StrCat("num_layers ", d.num_layers,
                                                   " is smaller than pipeline-parallel size ", pp,
                                                   " (every stage needs at least one layer)"));
  }
  return s;
}

namespace {

// The default counts: the split that minimizes the most expensive stage, a layer costing 1 and
// the last stage paying `last_stage_extra` more; among equal maxima the one with the least
// spread of stage costs (sum of squared deviations), then the smaller last stage. Every stage but
// the last takes an even share of the other layers, remainder to the earlier ones. With no extra
// cost this is the even split with the remainder on the earlier stages.
std::vector<int> DefaultCounts(int num_layers, int pp, double last_stage_extra) {
  if (pp == 1) return {num_layers};
  std::vector<int> best;
  double best_max = 0, best_spread = 0;
  for (int last = 1; last <= num_layers - (pp - 1); ++last) {
    std::vector<int> c(pp, 0);
    c[pp - 1] = last;
    const int rest = num_layers - last;
    for (int s = 0; s < pp - 1; ++s) c[s] = rest / (pp - 1) + (s < rest % (pp - 1) ? 1 : 0);
    const double mean = (num_layers + last_stage_extra) / pp;
    double max_cost = 0, spread = 0;
    for (int s = 0; s < pp; ++s) {
      const double cost = c[s] + (s == pp - 1 ? last_stage_extra : 0.0);
      max_cost = std::max(max_cost, cost);
      spread += (cost - mean) * (cost - mean);
    }
    constexpr double kEps = 1e-9;
    if (best.empty() || max_cost < best_max - kEps || (max_cost < best_max + kEps && spread < best_spread - kEps)) {
      best = std::move(c);
      best_max = max_cost;
      best_spread = spread;
    }
  }
  return best;
}

}  // namespace

absl::StatusOr<std::vector<LayerRange>> SplitLayers(int num_layers, int pp, absl::Span<const int> layers_per_stage,
                                                    double last_stage_extra) {
  if (pp < 1) return absl::InvalidArgumentError(absl::StrCat("pp must be >= 1, got ", pp));
  if (num_layers < pp) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_layers ", num_layers, " is smaller than pipeline-parallel size ", pp));
  }
  std::vector<int> counts;
  if (!(last_stage_extra >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat("last stage extra cost ", last_stage_extra, " must be >= 0"));
  }
  if (layers_per_stage.empty()) {
    counts = DefaultCounts(num_layers, pp, last_stage_extra);
  } else {
    if (static_cast<int>(layers_per_stage.size()) != pp) {
      return absl::InvalidArgumentError(
          absl::StrCat("layers per stage [", absl::StrJoin(layers_per_stage, ","), "] has ",
                       layers_per_stage.size(), " entries, expected pp = ", pp));
    }
    long long sum = 0;
    for (int c : layers_per_stage) {
      if (c < 1) {
        return absl::InvalidArgumentError(absl::StrCat("layers per stage [",
                                                       absl::StrJoin(layers_per_stage, ","),
                                                       "]: every stage needs at least one layer"));
      }
      sum += c;
    }
    if (sum != num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("layers per stage [",
                                                     absl::StrJoin(layers_per_stage, ","), "] sums to ", sum,
                                                     ", expected num_layers = ", num_layers));
    }
    counts.assign(layers_per_stage.begin(), layers_per_stage.end());
  }
  std::vector<LayerRange> ranges;
  ranges.reserve(pp);
  int begin = 0;
  for (int c : counts) {
    ranges.push_back(LayerRange{begin, begin + c});
    begin += c;
  }
  return ranges;
}

absl::StatusOr<std::vector<int>> ParseLayersPerStage(absl::string_view text) {
  std::vector<int> counts;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int n;
    if (!absl::SimpleAtoi(part, &n))
      return absl::InvalidArgumentError(absl::StrCat("--layers-per-stage: '", part, "' is not a number"));
    counts.push_back(n);
  }
  return counts;
}

absl::StatusOr<LayerRange> StageLayers(int num_layers, int pp, int stage, absl::Span<const int> layers_per_stage,
                                       double last_stage_extra) {
  if (stage < 0 || stage >= pp) {
    return absl::InvalidArgumentError(absl::StrCat("stage ", stage, " out of range [0, ", pp, ")"));
  }
  auto ranges = SplitLayers(num_layers, pp, layers_per_stage, last_stage_extra);
  if (!ranges.ok()) return ranges.status();
  return (*ranges)[stage];
}

}  // namespace llm
