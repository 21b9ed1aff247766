// Sequence: the engine thread's record of one request through its life:
//   waiting --(scheduled)--> running --(finished/cancelled/deadline)--> gone
//                ^----------(preempted: blocks freed, recomputed later)----'
// Its tokens are prompt + generated. With overlapped steps the host plans a step before it knows
// the tokens the steps still on the device will sample: those are `pending_tokens`, appended to
// `tokens` when their step is collected. The sequence's length counts them; a step that needs
// one as input names it by a placeholder (StepPlan), which the device resolves.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/time/time.h"
#include "engine/kv_cache/kv_block_pool.h"
#include "engine/request.h"

namespace llm {

struct Sequence {
  RequestId id = 0;
  uint64_t arrival_order = 0;  // FCFS tie-break within a priority
  GenerateRequest request;

  std::vector<int32_t> tokens;  // prompt, then the generated tokens the host knows
  int32_t prompt_len = 0;
  // Tokens whose K/V launched steps write (advanced when a step is scheduled, so that the next
  // step can continue from there before this one is collected; 0 again after a preemption).
  int32_t num_computed = 0;
  int32_t pending_tokens = 0;  // sampled by launched steps, not yet collected
  int32_t pending_row = -1;    // the latest one's row among its step's samples
  int32_t in_flight = 0;       // launched steps with this sequence, not yet collected
  KvBlockTable blocks;
  uint64_t salt_hash = 0;       // SaltHash(request.cache_salt): the start of its block-hash chain
  int32_t cached_tokens = -1;   // prompt tokens its first admission found in the prefix cache
  bool running = false;
  int32_t preemptions = 0;

  absl::Time arrival;
  absl::Time first_scheduled = absl::InfinitePast();
  absl::Time first_token = absl::InfinitePast();

  // Known and pending tokens.
  int32_t length() const { return static_cast<int32_t>(tokens.size()) + pending_tokens; }
  // Generated tokens the host knows (the output so far).
  int32_t completion_tokens() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
  // Generated tokens including pending ones: the sampling step (RNG counter) of the next one.
  int32_t scheduled_completion_tokens() const { return length() - prompt_len; }
};

}  // namespace llm
