// Topology: where one rank sits in the tensor-parallel (TP) x pipeline-parallel (PP) grid.
//
// A small value type with no MPI, NCCL or CUDA in it, so it is unit-tested on any machine.
//
// Layout: consecutive world ranks form one TP group, so a TP group (the ranks that all-reduce
// after every layer) stays inside one node when the launcher places ranks by slot:
//
//   rank = pp_stage * tp + tp_rank
//
//   tp=2, pp=2:            tp_rank 0   tp_rank 1
//        pp_stage 0        rank 0      rank 1      <- TP group of stage 0
//        pp_stage 1        rank 2      rank 3      <- TP group of stage 1
//                          ^ PP "column" of tp_rank 0 (ranks that pass activations stage to stage)
//
// The local device of a rank is its local rank (rank among the processes on its node).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace llm {

class Topology {
 public:
  // Validates and builds the topology of `rank`. InvalidArgument when world_size != tp * pp,
  // tp or pp < 1, rank or local_rank out of range, or local_size larger than world_size.
  static absl::StatusOr<Topology> Create(int world_size, int rank, int local_rank, int local_size, int tp,
                                         int pp);
  // The trivial topology of a single process: world 1, tp 1, pp 1.
  static Topology Single();

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int tp_size() const { return tp_; }
  int pp_size() const { return pp_; }

  int tp_rank() const { return rank_ % tp_; }
  int pp_stage() const { return rank_ / tp_; }
  // CUDA device index of this rank on its node.
  int device() const { return local_rank_; }

  // World rank at (stage, tp_rank); both must be in range.
  int RankAt(int pp_stage, int tp_rank) const { return pp_stage * tp_ + tp_rank; }

  // World ranks of my TP group (same stage), in tp_rank order.
  std::vector<int> TpGroupRanks() const;
  // World ranks of my PP column (same tp_rank), in stage order.
  std::vector<int> PpGroupRanks() const;

  // Colors for splitting the world communicator: ranks with equal color share a group, and
  // within it the group rank equals tp_rank() (TP group) or pp_stage() (PP group).
  int tp_group_color() const { return pp_stage(); }
  int pp_group_color() const { return tp_rank(); }

  bool is_first_stage() const { return pp_stage() == 0; }
  bool is_last_stage() const { return pp_stage() == pp_ - 1; }
  // World rank of the same tp_rank in the previous / next stage; nullopt at the ends.
  std::optional<int> PrevStageRank() const;
  std::optional<int> NextStageRank() const;

  // True when TP groups do not straddle nodes (assuming ranks placed by slot, local_size per node).
  bool tp_group_within_node() const { return local_size_ % tp_ == 0; }

  // "rank 3/4 (local 1/2, device 1): tp 1/2, pp stage 1/2"
  std::string ToString() const;

  friend bool operator==(const Topology&, const Topology&) = default;

 private:
  Topology(int world_size, int rank, int local_rank, int local_size, int tp, int pp)
      : world_size_(world_size),
        rank_(rank),
        local_rank_(local_rank),
        local_size_(local_size),
        tp_(tp),
        pp_(pp) {}

  int world_size_;
  int rank_;
  int local_rank_;
  int local_size_;
  int tp_;
  int pp_;
};

// The model dimensions that tensor/pipeline parallelism splits.
struct ModelDims {
  int num_heads = 0;
  int num_kv_heads = 0;
  int intermediate_size = 0;  // FFN width
  int vocab_size = 0;
  int num_layers = 0;
};

// What one TP rank holds.
struct ShardedDims {
  int heads_per_rank = 0;
  // KV heads stored on each rank. When the model has fewer KV heads than TP ranks, each KV head
  // is replicated on kv_replication consecutive TP ranks and every rank holds one.
  int kv_heads_per_rank = 0;
  int kv_replication = 1;
  int intermediate_per_rank = 0;
  // The vocabulary is padded up to a multiple of tp; each rank holds vocab_per_rank rows of the
  // embedding / LM head; rows >= vocab_size are padding (zero weights, logits masked to -inf).
  int vocab_per_rank = 0;
  int padded_vocab_size = 0;
};

// Checks that the model splits over tp x pp: num_heads % tp == 0, intermediate_size % tp == 0,
// num_heads % num_kv_heads == 0, KV heads either divisible by tp or dividing tp (replicated),
// num_layers >= pp. The vocabulary needs no divisibility (it is padded). InvalidArgument with the
// offending numbers otherwise.
absl::StatusOr<ShardedDims> ShardModel(const ModelDims& dims, int tp, int pp);

// A half-open range of decoder layers [begin, end).
struct LayerRange {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
  friend bool operator==(const LayerRange&, const LayerRange&) = default;
};

// The layer range of every stage. With `layers_per_stage` empty the split balances the stages'
// costs, a layer costing 1 and the last stage `last_stage_extra` more: it also runs the final norm,
// the LM head (a vocab x hidden matmul) and the sampler (engine/model/config.h's
// LmHeadLayerEquivalents estimates it from the weight bytes). The most expensive stage is made
// as cheap as possible, then the costs as even as possible; with no extra cost that is the even
// split with the remainder on the EARLIER stages (the first num_layers % pp get one layer more).
// Otherwise `layers_per_stage` gives each stage's count explicitly: it must have pp entries,
// each >= 1, summing to num_layers. InvalidArgument for a negative extra cost.
absl::StatusOr<std::vector<LayerRange>> SplitLayers(int num_layers, int pp,
                                                    absl::Span<const int> layers_per_stage = {},
                                                    double last_stage_extra = 0.0);

// "17,15" -> {17, 15}: the text form of `layers_per_stage` (--layers-per-stage); empty text gives
// no counts (the default split). InvalidArgument naming a part that is not a number; the counts
// themselves are checked by SplitLayers.
absl::StatusOr<std::vector<int>> ParseLayersPerStage(absl::string_view text);

// The range of one stage; same rules as SplitLayers.
absl::StatusOr<LayerRange> StageLayers(int num_layers, int pp, int stage,
                                       absl::Span<const int> layers_per_stage = {},
                                       double last_stage_extra = 0.0);

}  // namespace llm
