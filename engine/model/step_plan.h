// StepPlan: one forward step as host arrays, built by the scheduler and executed by every rank.
// It is the host image of StepMetadata; it is plain data so it can be broadcast to the other
// ranks. Vectors keep their capacity between steps, so steady-state planning does not allocate.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace llm {

struct StepPlan {
  int32_t block_table_width = 0;  // fixed: blocks of the longest allowed sequence
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  std::vector<int32_t> token_ids;     // [T]
  std::vector<int32_t> positions;     // [T]
  std::vector<int32_t> slot_mapping;  // [T]
  std::vector<int32_t> query_start;   // [S + 1]
  std::vector<int32_t> context_lens;  // [S]
  std::vector<int32_t> block_tables;  // [S * block_table_width], -1 padded
  std::vector<int32_t> logit_rows;    // rows whose logits are sampled

  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(context_lens.size()); }

  void Clear() {
    max_query_len = max_context_len = 0;
    token_ids.clear();
    positions.clear();
    slot_mapping.clear();
    query_start.assign(1, 0);
    context_lens.clear();
    block_tables.clear();
    logit_rows.clear();
  }

  // Adds a sequence's `tokens` at positions [start, start + tokens.size()), whose KV lives in
  // `blocks`. With `want_logits`, the last token's logits are computed.
  void AddSequence(absl::Span<const int32_t> tokens, int32_t start, absl::Span<const int32_t> blocks,
                   int32_t block_size, bool want_logits) {
    if (query_start.empty()) query_start.push_back(0);
    for (size_t i = 0; i < tokens.size(); ++i) {
      const int32_t pos = start + static_cast<int32_t>(i);
      token_ids.push_back(tokens[i]);
      positions.push_back(pos);
      slot_mapping.push_back(blocks[pos / block_size] * block_size + pos % block_size);
    }
    if (want_logits) logit_rows.push_back(num_tokens() - 1);
    query_start.push_back(num_tokens());
    const int32_t ctx = start + static_cast<int32_t>(tokens.size());
    context_lens.push_back(ctx);
    const size_t row = block_tables.size();
    block_tables.resize(row + block_table_width, -1);
    for (size_t b = 0; b < blocks.size() && b < static_cast<size_t>(block_table_width); ++b)
      block_tables[row + b] = blocks[b];
    if (static_cast<int32_t>(tokens.size()) > max_query_len) max_query_len = static_cast<int32_t>(tokens.size());
    if (ctx > max_context_len) max_context_len = ctx;
  }
};

}  // namespace llm
