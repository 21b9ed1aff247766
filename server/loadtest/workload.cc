#include "server/loadtest/workload.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"

namespace llm::loadtest {
namespace {

// Without the model's tokenizer a text's length is estimated: about 4 characters a token, the
// usual figure for English text under BPE vocabularies.
constexpr int64_t kCharsPerToken = 4;

int64_t EstimateTokens(const std::string& text) {
  return std::max<int64_t>(1, static_cast<int64_t>(text.size()) / kCharsPerToken);
}

}  // namespace

Workload::Workload(WorkloadOptions options, const ModelLimits& model)
    : options_(std::move(options)), model_(model), rng_(options_.seed) {}

absl::StatusOr<std::unique_ptr<Workload>> Workload::Create(WorkloadOptions options, const ModelLimits& model,
                                                           const TokenCounter& count_tokens) {
  if (model.vocab_size < 1 || model.context_length < 2)
    return absl::InvalidArgumentError("the server reported no vocabulary or context length");
  auto w = std::unique_ptr<Workload>(new Workload(std::move(options), model));
  if (w->options_.dataset) {
    RETURN_IF_ERROR(w->PrepareDataset(count_tokens));
  } else if (w->options_.input_len.Max() + w->options_.shared_prefix_len >= model.context_length) {
    return absl::InvalidArgumentError(absl::StrCat("--input-len ", w->options_.input_len.ToString(),
                                                   w->options_.shared_prefix_len > 0
                                                       ? absl::StrCat(" after a ", w->options_.shared_prefix_len,
                                                                      "-token shared prefix")
                                                       : "",
                                                   " does not fit the context length ", model.context_length));
  }
  if (w->options_.shared_prefix_len > 0)
    for (int64_t i = 0; i < std::max<int64_t>(1, w->options_.shared_prefixes); ++i)
      w->prefixes_.push_back(w->RandomIds(w->options_.shared_prefix_len));
  if (w->options_.turns > 1) w->conversations_.resize(std::max<int64_t>(1, w->options_.conversations));
  return w;
}

std::vector<int32_t> Workload::RandomIds(int64_t n) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(model_.vocab_size - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& x : ids) x = id(rng_);
  return ids;
}

void Workload::AddRandomIds(int64_t n, v1::GenerateRequest* request) {
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(model_.vocab_size - 1));
  auto* ids = request->mutable_token_ids()->mutable_ids();
  ids->Reserve(static_cast<int>(n));
  for (int64_t i = 0; i < n; ++i) ids->Add(id(rng_));
}

std::shared_ptr<v1::GenerateRequest> Workload::NewRequest(int64_t output_len) {
  auto r = std::make_shared<v1::GenerateRequest>();
  r->mutable_sampling()->set_temperature(static_cast<float>(options_.temperature));
  if (options_.top_p < 1) r->mutable_sampling()->set_top_p(static_cast<float>(options_.top_p));
  r->mutable_sampling()->set_seed(rng_());
  r->mutable_stopping()->set_max_tokens(static_cast<int32_t>(output_len));
  r->mutable_stopping()->set_ignore_eos(!options_.honor_eos);
  return r;
}

absl::Status Workload::PrepareDataset(const TokenCounter& count_tokens) {
  std::vector<DatasetEntry>& entries = options_.dataset->entries;
  skipped_ = options_.dataset->skipped;
  std::shuffle(entries.begin(), entries.end(), rng_);
  const size_t want = options_.max_dataset_entries > 0
                          ? std::min(entries.size(), static_cast<size_t>(options_.max_dataset_entries))
                          : entries.size();
  for (const DatasetEntry& e : entries) {
    if (prepared_.size() >= want) break;
    const bool send_text = !e.prompt.empty() && model_.has_tokenizer;
    int64_t prompt_len = e.prompt_len;
    if (!e.prompt_token_ids.empty()) {
      prompt_len = static_cast<int64_t>(e.prompt_token_ids.size());
    } else if (send_text) {
      ASSIGN_OR_RETURN(prompt_len, count_tokens(e.prompt, /*add_special_tokens=*/true));
    } else if (prompt_len == 0) {
      prompt_len = EstimateTokens(e.prompt);
    }
    int64_t output_len = e.output_len;
    if (options_.override_output_len) {
      output_len = options_.output_len.Sample(rng_);
    } else if (output_len == 0) {
      if (model_.has_tokenizer) {
        ASSIGN_OR_RETURN(output_len, count_tokens(e.reference_output, /*add_special_tokens=*/false));
      } else {
        output_len = EstimateTokens(e.reference_output);
      }
    }
    const bool bad_ids = std::any_of(e.prompt_token_ids.begin(), e.prompt_token_ids.end(),
                                     [&](int32_t id) { return id < 0 || id >= model_.vocab_size; });
    if (prompt_len < 1 || output_len < 1 || prompt_len + output_len > model_.context_length || bad_ids) {
      ++skipped_;
      continue;
    }
    std::shared_ptr<v1::GenerateRequest> r = NewRequest(output_len);
    if (send_text) {
      r->set_text(e.prompt);
    } else if (!e.prompt_token_ids.empty()) {
      r->mutable_token_ids()->mutable_ids()->Add(e.prompt_token_ids.begin(), e.prompt_token_ids.end());
    } else {
      AddRandomIds(prompt_len, r.get());
    }
    prepared_.push_back({std::move(r), prompt_len, output_len});
  }
  if (prepared_.empty())
    return absl::InvalidArgumentError(absl::StrCat("no dataset entry fits the context length ",
                                                   model_.context_length, " (", skipped_, " skipped)"));
  return absl::OkStatus();
}

RequestSpec Workload::Next() {
  if (!prepared_.empty()) {
    // The seed of a reused request stays: the same prompt and seed give the same tokens anyway.
    RequestSpec spec = prepared_[next_prepared_];
    next_prepared_ = (next_prepared_ + 1) % prepared_.size();
    return spec;
  }
  int64_t in = options_.input_len.Sample(rng_);
  int64_t out = options_.output_len.Sample(rng_);
  if (!conversations_.empty()) {
    Conversation& c = conversations_[next_conversation_];
    next_conversation_ = (next_conversation_ + 1) % conversations_.size();
    if (c.turns_done >= options_.turns ||
        static_cast<int64_t>(c.history.size()) + in + out > model_.context_length)
      c = Conversation();  // all its turns done (or the context full): a new conversation
    if (c.turns_done > 0) {  // the previous turn's answer, as far as the generator knows it
      const std::vector<int32_t> answer = RandomIds(options_.output_len.Sample(rng_));
      c.history.insert(c.history.end(), answer.begin(), answer.end());
    }
    const std::vector<int32_t> question = RandomIds(in);
    c.history.insert(c.history.end(), question.begin(), question.end());
    ++c.turns_done;
    const int64_t prompt_len = static_cast<int64_t>(c.history.size());
    if (prompt_len + out > model_.context_length) {
      ++clipped_;
      out = std::max<int64_t>(1, model_.context_length - prompt_len);
    }
    std::shared_ptr<v1::GenerateRequest> r = NewRequest(out);
    r->mutable_token_ids()->mutable_ids()->Add(c.history.begin(), c.history.end());
    return {std::move(r), prompt_len, out, c.turns_done};
  }
  const int64_t prefix = prefixes_.empty() ? 0 : options_.shared_prefix_len;
  if (prefix + in + out > model_.context_length) {
    ++clipped_;
    out = std::max<int64_t>(1, model_.context_length - prefix - in);
  }
  std::shared_ptr<v1::GenerateRequest> r = NewRequest(out);
  if (!prefixes_.empty()) {
    const std::vector<int32_t>& p = prefixes_[rng_() % prefixes_.size()];
    r->mutable_token_ids()->mutable_ids()->Add(p.begin(), p.end());
  }
  AddRandomIds(in, r.get());
  return {std::move(r), prefix + in, out};
}

std::string Workload::Describe() const {
  if (options_.dataset)
    return absl::StrCat(
        "dataset: ", prepared_.size(), " prompts (", skipped_, " skipped), ",
        model_.has_tokenizer ? "text" : "random token ids of the prompts' estimated length",
        options_.override_output_len ? absl::StrCat(", output ", options_.output_len.ToString()) : "");
  std::string shape;
  if (options_.turns > 1)
    shape = absl::StrCat(", ", options_.turns, "-turn conversations (", conversations_.size(),
                         " at a time) resending their history");
  else if (!prefixes_.empty())
    shape = absl::StrCat(", after one of ", prefixes_.size(), " shared prefixes of ", options_.shared_prefix_len,
                         " tokens");
  return absl::StrCat("synthetic: input ", options_.input_len.ToString(), " tokens (random ids)", shape,
                      ", output ", options_.output_len.ToString(), " tokens");
}

}  // namespace llm::loadtest
