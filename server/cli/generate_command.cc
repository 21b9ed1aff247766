// llm generate: one request through the engine, streamed to stdout; with --json the last line is
// one JSON object (token_ids, text, finish_reason, usage, timings).
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/engine_builder.h"
#include "nlohmann/json.hpp"
#include "server/cli/commands.h"
#include "server/cli/model_flags.h"

namespace llm::cli {
namespace {

absl::StatusOr<std::vector<int32_t>> ParseIds(const std::string& text) {
  std::vector<int32_t> ids;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id))
      return absl::InvalidArgumentError(absl::StrCat("--prompt-ids: '", std::string(part), "' is not a token id"));
    ids.push_back(id);
  }
  if (ids.empty()) return absl::InvalidArgumentError("--prompt-ids is empty");
  return ids;
}

// Collects a request's outputs from the engine thread for the main thread.
class OutputQueue {
 public:
  void Push(RequestOutput out) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(out));
    cv_.notify_one();
  }
  RequestOutput Pop() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !queue_.empty(); });
    RequestOutput out = std::move(queue_.front());
    queue_.pop_front();
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> queue_;
};

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "llm generate: %s\n", std::string(status.message()).c_str());
  return code;
}

}  // namespace

int RunGenerate(int argc, char** argv) {
  FlagSet flags("generate", "Generates a continuation of a prompt with a local model.");
  ModelFlags model;
  model.Register(flags);
  std::string prompt, prompt_ids, logit_bias;
  int64_t max_tokens = 16, min_tokens = 0, top_k = 0, seed = 0, logprobs = 0;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition_penalty = 1.0, presence = 0.0, frequency = 0.0;
  bool ignore_eos = false, json = false, no_special = false;
  std::vector<std::string> stop;
  flags.String("prompt", &prompt, "prompt text (needs the model's tokenizer)");
  flags.String("prompt-ids", &prompt_ids, "prompt as comma-separated token ids, e.g. 1,2,3");
  flags.Bool("no-special-tokens", &no_special, "do not add the tokenizer's special tokens (e.g. BOS) to --prompt");
  flags.Int("max-tokens", &max_tokens, "tokens to generate at most");
  flags.Int("min-tokens", &min_tokens, "tokens to generate before EOS or a stop may end the output");
  flags.Float("temperature", &temperature, "sampling temperature; 0 is greedy");
  flags.Int("top-k", &top_k, "keep the k most likely tokens (0 or -1: off)");
  flags.Float("top-p", &top_p, "nucleus sampling mass in (0, 1]");
  flags.Float("min-p", &min_p, "drop tokens below min-p x the top probability");
  flags.Float("repetition-penalty", &repetition_penalty, "penalty on tokens already seen (1: off)");
  flags.Float("presence-penalty", &presence, "penalty on tokens already generated");
  flags.Float("frequency-penalty", &frequency, "penalty per occurrence of a generated token");
  flags.Int("seed", &seed, "random seed (same seed, same output)");
  flags.String("logit-bias", &logit_bias, "comma-separated ID:BIAS pairs added to those tokens' logits ([-100, 100])");
  flags.Int("logprobs", &logprobs, "top log-probabilities to report per token (0-20)");
  flags.StringList("stop", &stop, "stop string");
  flags.Bool("ignore-eos", &ignore_eos, "keep generating past the end-of-sequence token");
  flags.Bool("json", &json, "print one JSON object as the last line of stdout");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (absl::Status s = model.Validate(); !s.ok()) return Fail(s, 2);

  if (flags.IsSet("prompt") == flags.IsSet("prompt-ids"))
    return Fail(absl::InvalidArgumentError("give exactly one of --prompt and --prompt-ids"), 2);
  if (model.ModelDir().empty()) return Fail(absl::InvalidArgumentError("--model is required"), 2);

  GenerateRequest request;
  auto biases = ParseLogitBiasFlag(logit_bias);
  if (!biases.ok()) return Fail(biases.status(), 2);
  for (const auto& [token, bias] : *biases) request.logit_bias.push_back({token, bias});
  if (flags.IsSet("prompt-ids")) {
    auto ids = ParseIds(prompt_ids);
    if (!ids.ok()) return Fail(ids.status(), 2);
    request.prompt_tokens = std::move(*ids);
  }
  auto handle = Deploy(model, &argc, &argv);
  if (!handle.ok()) return Fail(handle.status(), IsUsageError(handle.status()) ? 2 : 1);
  if ((*handle)->engine() == nullptr) {  // a worker rank of an mpirun group
    absl::Status s = (*handle)->RunWorker();
    return s.ok() ? 0 : Fail(s, 1);
  }
  Engine& engine = *(*handle)->engine();
  const std::shared_ptr<const Tokenizer> tokenizer = (*handle)->tokenizer();
  if (flags.IsSet("prompt")) {
    if (!tokenizer) return Fail(absl::InvalidArgumentError("this model has no tokenizer.json: use --prompt-ids"), 2);
    auto ids = tokenizer->Encode(prompt, !no_special);
    if (!ids.ok()) return Fail(ids.status(), 2);
    request.prompt_tokens = std::move(*ids);
  }
  request.detokenize = tokenizer != nullptr;
  request.sampling.temperature = static_cast<float>(temperature);
  request.sampling.top_k = static_cast<int32_t>(top_k == -1 ? 0 : top_k);  // -1: vLLM's "off"
  request.sampling.top_p = static_cast<float>(top_p);
  request.sampling.min_p = static_cast<float>(min_p);
  request.sampling.repetition_penalty = static_cast<float>(repetition_penalty);
  request.sampling.presence_penalty = static_cast<float>(presence);
  request.sampling.frequency_penalty = static_cast<float>(frequency);
  request.sampling.num_top_logprobs = static_cast<int32_t>(logprobs);
  request.has_seed = flags.IsSet("seed");
  request.sampling.seed = static_cast<uint64_t>(seed);
  request.stop.max_tokens = static_cast<int32_t>(std::min<int64_t>(max_tokens, INT32_MAX));
  request.stop.min_tokens = static_cast<int32_t>(std::min<int64_t>(min_tokens, INT32_MAX));
  request.stop.ignore_eos = ignore_eos;
  request.stop.stop_strings = stop;

  OutputQueue outputs;
  auto id = engine.Submit(std::move(request), [&outputs](RequestOutput out) { outputs.Push(std::move(out)); });
  if (!id.ok()) return Fail(id.status(), 2);

  std::vector<int32_t> tokens;
  std::string text;
  nlohmann::json logprob_list = nlohmann::json::array();
  for (;;) {
    RequestOutput out = outputs.Pop();
    tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
    text += out.text;
    for (const SampleResult& r : out.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (int i = 0; i < r.num_top; ++i) top.push_back({{"token_id", r.top[i].token}, {"logprob", r.top[i].logprob}});
      logprob_list.push_back({{"token_id", r.token}, {"logprob", r.logprob}, {"top", top}});
    }
    if (!json && !out.text.empty()) {
      std::fputs(out.text.c_str(), stdout);
      std::fflush(stdout);
    } else if (!json && !tokenizer) {  // a model without a tokenizer: its token ids
      for (int32_t id : out.token_ids) std::printf("[%d]", id);
      std::fflush(stdout);
    }
    if (!out.finished) continue;
    if (out.finish_reason == FinishReason::kError) return Fail(out.status, 1);
    if (json) {
      nlohmann::json j = {{"token_ids", tokens},
                          {"text", text},
                          {"finish_reason", std::string(FinishReasonName(out.finish_reason))},
                          {"prompt_tokens", out.prompt_tokens},
                          {"completion_tokens", out.completion_tokens},
                          {"timings_ms",
                           {{"queue", out.timings.queue_ms},
                            {"time_to_first_token", out.timings.ttft_ms},
                            {"decode", out.timings.decode_ms},
                            {"total", out.timings.total_ms}}}};
      if (logprobs > 0) j["logprobs"] = logprob_list;
      std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("\n");
      if (logprobs > 0) std::printf("%s\n", nlohmann::json({{"logprobs", logprob_list}}).dump().c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "[%d prompt + %d generated tokens, finish: %s, %.1f tokens/s]\n", out.prompt_tokens,
                   out.completion_tokens, std::string(FinishReasonName(out.finish_reason)).c_str(),
                   out.timings.decode_ms > 0 ? 1000.0 * (out.completion_tokens - 1) / out.timings.decode_ms : 0.0);
    }
    break;
  }
  return 0;
}

}  // namespace llm::cli
