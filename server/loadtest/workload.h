// Workload: the requests of a load test, one at a time. Synthetic (prompt and output lengths from
// LengthDistributions, prompts of random token ids) or from a dataset file (text prompts when the
// server has a tokenizer, else random token ids of the prompt's estimated length). Every request
// asks for exactly its output length: max_tokens = output length and EOS ignored (unless
// honor_eos), so that load is what was asked for.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "llm/v1/llm.pb.h"
#include "server/loadtest/dataset.h"
#include "server/loadtest/length_distribution.h"

namespace llm::loadtest {

struct WorkloadOptions {
  LengthDistribution input_len = LengthDistribution::Fixed(128);
  LengthDistribution output_len = LengthDistribution::Fixed(128);
  std::optional<Dataset> dataset;    // when set, prompts (and output lengths) come from it
  bool override_output_len = false;  // with a dataset: use output_len instead of the file's
  int64_t max_dataset_entries = 0;   // prepare at most this many (shuffled) entries; 0: all
  // Synthetic prompts that share prefixes (prefix caching scenarios): each request starts with
  // one of `shared_prefixes` fixed random prefixes of `shared_prefix_len` tokens (chosen at
  // random), then input_len tokens of its own.
  int64_t shared_prefix_len = 0;
  int64_t shared_prefixes = 1;
  // Multi-turn conversations (turns > 1): `conversations` of them, replayed round-robin; turn t's
  // prompt resends the whole conversation so far (earlier prompts, output_len random ids standing
  // in for each answer, which the load generator does not read back) plus input_len new tokens.
  // A conversation that has had all its turns starts over as a new one.
  int64_t turns = 0;
  int64_t conversations = 16;
  double temperature = 0;            // 0: greedy
  double top_p = 1;                  // < 1: sent as the requests' top_p
  bool honor_eos = false;
  uint64_t seed = 1;
};

// What the workload needs to know about the served model.
struct ModelLimits {
  int64_t vocab_size = 0;
  int64_t context_length = 0;
  bool has_tokenizer = false;
};

struct RequestSpec {
  std::shared_ptr<const v1::GenerateRequest> request;
  int64_t prompt_len = 0;  // tokens (estimated for text prompts without a tokenizer)
  int64_t output_len = 0;  // max_tokens
  int32_t turn = 0;        // 1-based turn of a multi-turn conversation; 0 otherwise
};

class Workload {
 public:
  // Counts the tokens of a text (the server's Tokenize); used for dataset entries when the
  // server has a tokenizer.
  using TokenCounter =
      std::function<absl::StatusOr<int64_t>(const std::string& text, bool add_special_tokens)>;

  static absl::StatusOr<std::unique_ptr<Workload>> Create(WorkloadOptions options, const ModelLimits& model,
                                                          const TokenCounter& count_tokens);

  // The next request. Not thread-safe (the load runner's issuing thread calls it).
  RequestSpec Next();

  // A line for the report: "synthetic input 128 output uniform:1:256", "dataset 812 prompts".
  std::string Describe() const;
  // Dataset entries left out: unusable in the file, or too long for the context.
  int64_t skipped_entries() const { return skipped_; }
  // Synthetic requests whose lengths were cut to fit the context so far.
  int64_t clipped_requests() const { return clipped_; }

 private:
  Workload(WorkloadOptions options, const ModelLimits& model);
  absl::Status PrepareDataset(const TokenCounter& count_tokens);
  std::shared_ptr<v1::GenerateRequest> NewRequest(int64_t output_len);
  void AddRandomIds(int64_t n, v1::GenerateRequest* request);

  WorkloadOptions options_;
  ModelLimits model_;
  std::mt19937_64 rng_;
  std::vector<RequestSpec> prepared_;  // the dataset's requests, shuffled, reused in turn
  std::vector<std::vector<int32_t>> prefixes_;  // shared prefixes (shared_prefix_len > 0)
  struct Conversation {
    std::vector<int32_t> history;
    int32_t turns_done = 0;
  };
  std::vector<Conversation> conversations_;
  size_t next_conversation_ = 0;
  std::vector<int32_t> RandomIds(int64_t n);
  size_t next_prepared_ = 0;
  int64_t skipped_ = 0;
  int64_t clipped_ = 0;
};

}  // namespace llm::loadtest
