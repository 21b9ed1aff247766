// Sequence: the engine's record of one request through its life:
//   waiting --(scheduled)--> running --(finished/cancelled/deadline)--> gone
//                ^----------(preempted: blocks freed, recomputed later)----'
// Its tokens are prompt + generated; num_computed of them have K/V in the cache.
#pragma once

#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "engine/kv_cache/kv_block_pool.h"
#include "engine/request.h"
#include "engine/scheduler/stop_checker.h"
#include "engine/tokenizer/tokenizer.h"

namespace llm {

struct Sequence {
  RequestId id = 0;
  uint64_t arrival_order = 0;  // FCFS tie-break within a priority
  GenerateRequest request;
  OutputCallback callback;

  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int32_t prompt_len = 0;
  int32_t num_computed = 0;     // tokens whose K/V is in the cache
  KvBlockTable blocks;
  bool running = false;
  bool in_flight = false;       // in a launched step whose tokens have not come back
  int32_t preemptions = 0;

  absl::Time arrival;
  absl::Time first_scheduled = absl::InfinitePast();
  absl::Time first_token = absl::InfinitePast();

  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  std::unique_ptr<StopChecker> stop;
  // Produced since the last output was sent.
  std::vector<int32_t> unsent_tokens;
  std::vector<SampleResult> unsent_logprobs;

  int32_t completion_tokens() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
  bool prefilling() const { return num_computed < static_cast<int32_t>(tokens.size()) - 1; }
};

}  // namespace llm
