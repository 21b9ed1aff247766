#include "engine/distributed/step_message.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/distributed/wire_format.h"

namespace llm {
namespace {

using wire::Reader;
using wire::Writer;

constexpr uint32_t kMagic = 0x504c5453;         // "STLP"
constexpr uint32_t kResultsMagic = 0x53455253;  // "SRES"

bool NeedsTokens(const SamplingParams& p) {
  return p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
}

}  // namespace

void EncodeStepMessage(const StepPlan& plan, absl::Span<const SampleRow> rows, std::string& out) {
  Writer w(out);
  w.Put(kMagic);
  w.Put(plan.block_table_width);
  w.Put(plan.max_query_len);
  w.Put(plan.max_context_len);
  w.PutVector<int32_t>(plan.token_ids);
  w.PutVector<int32_t>(plan.positions);
  w.PutVector<int32_t>(plan.slot_mapping);
  w.PutVector<int32_t>(plan.query_start);
  w.PutVector<int32_t>(plan.context_lens);
  w.PutVector<int32_t>(plan.block_tables);
  w.PutVector<int32_t>(plan.logit_rows);
  w.Put<uint32_t>(static_cast<uint32_t>(rows.size()));
  for (const SampleRow& r : rows) {
    w.Put(*r.params);
    w.Put(r.step);
    // Every rank that samples must count a pending token among the outputs for penalties, or the
    // ranks of a TP group would draw different tokens from the same logits.
    w.Put(r.pending_input_index);
    // Only penalties read the token history; leave it out otherwise.
    const bool tokens = NeedsTokens(*r.params);
    w.PutVector<int32_t>(tokens ? r.prompt_tokens : absl::Span<const int32_t>());
    w.PutVector<int32_t>(tokens ? r.output_tokens : absl::Span<const int32_t>());
    w.PutVector<LogitBias>(r.logit_bias);
  }
}

absl::Status DecodeStepMessage(const std::string& bytes, StepMessage& m) {
  Reader r(bytes);
  uint32_t magic = 0, num_rows = 0;
  StepPlan& p = m.plan;
  bool ok = r.Get(magic) && magic == kMagic && r.Get(p.block_table_width) && r.Get(p.max_query_len) &&
            r.Get(p.max_context_len) && r.GetVector(p.token_ids) && r.GetVector(p.positions) &&
            r.GetVector(p.slot_mapping) && r.GetVector(p.query_start) && r.GetVector(p.context_lens) &&
            r.GetVector(p.block_tables) && r.GetVector(p.logit_rows) && r.Get(num_rows);
  if (!ok) return absl::DataLossError("malformed step message");
  m.params.resize(num_rows);
  m.steps.resize(num_rows);
  m.prompt_tokens.resize(num_rows);
  m.output_tokens.resize(num_rows);
  m.pending_input_index.resize(num_rows);
  m.logit_bias.resize(num_rows);
  for (uint32_t i = 0; i < num_rows; ++i) {
    if (!(r.Get(m.params[i]) && r.Get(m.steps[i]) && r.Get(m.pending_input_index[i]) &&
          r.GetVector(m.prompt_tokens[i]) &&
          r.GetVector(m.output_tokens[i]) && r.GetVector(m.logit_bias[i])))
      return absl::DataLossError("malformed step message rows");
  }
  if (!r.done()) return absl::DataLossError("trailing bytes in step message");
  m.rows.resize(num_rows);
  for (uint32_t i = 0; i < num_rows; ++i)
    m.rows[i] = {&m.params[i], m.steps[i], m.prompt_tokens[i], m.output_tokens[i], m.pending_input_index[i],
                 m.logit_bias[i]};
  return absl::OkStatus();
}

void EncodeSampleResults(absl::Span<const SampleResult> results, std::string& out) {
  Writer w(out);
  w.Put(kResultsMagic);
  w.Put<uint32_t>(static_cast<uint32_t>(results.size()));
  for (const SampleResult& r : results) {
    w.Put(r.token);
    w.Put(r.logprob);
    const int32_t top = std::clamp<int32_t>(r.num_top, 0, kMaxTopLogprobs);
    w.Put(top);
    for (int32_t i = 0; i < top; ++i) w.Put(r.top[i]);
  }
}

absl::Status DecodeSampleResults(std::string_view bytes, absl::Span<SampleResult> results) {
  Reader r(bytes);
  uint32_t magic = 0, n = 0;
  if (!(r.Get(magic) && magic == kResultsMagic && r.Get(n))) return absl::DataLossError("malformed sample results");
  if (n != results.size())
    return absl::DataLossError(absl::StrCat("sample results hold ", n, " rows, the step sampled ", results.size()));
  for (SampleResult& out : results) {
    out = SampleResult{};
    if (!(r.Get(out.token) && r.Get(out.logprob) && r.Get(out.num_top)) || out.num_top < 0 ||
        out.num_top > kMaxTopLogprobs)
      return absl::DataLossError("malformed sample result row");
    for (int32_t i = 0; i < out.num_top; ++i)
      if (!r.Get(out.top[i])) return absl::DataLossError("truncated sample result row");
  }
  if (!r.done()) return absl::DataLossError("trailing bytes in sample results");
  return absl::OkStatus();
}

}  // namespace llm
