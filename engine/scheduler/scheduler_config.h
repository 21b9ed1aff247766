// The scheduler's limits and what it reports: plain data that the engine's public header shares.
#pragma once

#include <cstdint>

namespace llm {

struct SchedulerOptions {
  int32_t max_tokens_per_step = 2048;
  int32_t max_seqs = 256;
  int32_t block_size = 16;
  int32_t num_blocks = 0;
  int32_t block_table_width = 0;
  // Pipeline micro-batches (set by the engine from its executor). Above 1, a step takes at most
  // ceil(active sequences / micro_batches) of them, so that the micro-batches stay about the same
  // size: the pipeline runs at the pace of its largest one.
  int32_t micro_batches = 1;
  // Overlapped steps (set by the engine from its executor): a sequence may be scheduled again
  // while a launched step that contains it is not yet collected, its pending token named by a
  // placeholder. Off, a sequence is in at most one uncollected step (pipeline micro-batches).
  bool chain_steps = false;
  // Automatic prefix caching: full blocks are published by content as they are computed, and a
  // sequence admitted with nothing computed starts after the longest cached prefix of its tokens.
  bool prefix_caching = true;
};

struct SchedulerStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_total = 0;
  uint64_t preemptions = 0;
  // Prefix cache: tokens looked up at admission and found, blocks in its index, cached blocks
  // given out for other content.
  uint64_t prefix_cache_queried_tokens = 0;
  uint64_t prefix_cache_hit_tokens = 0;
  int32_t prefix_cache_blocks = 0;
  uint64_t prefix_cache_evictions = 0;
};

}  // namespace llm
