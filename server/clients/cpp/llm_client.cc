// llm_client: a small example client of `llm serve` (llm.v1.Llm over gRPC).
//
//   llm_client generate --server localhost:50051 --prompt "Hello" --max-tokens 32
//   llm_client generate --prompt-ids 1,2,3 --temperature 0 --unary --json
//   llm_client tokenize --text "Hello"      llm_client detokenize --ids 1,2,3
//   llm_client info                          llm_client health
//
// Exit codes: 0 success, 1 the call failed (the gRPC status is printed), 2 bad usage.
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "llm/v1/llm.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "server/cli/flags.h"

namespace {

using llm::cli::FlagSet;
using llm::cli::HandleParse;
using llm::cli::ParseLogitBiasFlag;
namespace v1 = llm::v1;

constexpr char kProgram[] = "llm_client";
constexpr char kUsage[] =
    "usage: llm_client <command> [--server HOST:PORT] [flags]\n\n"
    "commands:\n"
    "  generate     generate from a prompt (streamed; --unary for one response)\n"
    "  tokenize     token ids of a text\n"
    "  detokenize   text of token ids\n"
    "  info         what the server serves (model, context length, limits)\n"
    "  health       the grpc.health.v1 status\n\n"
    "Run 'llm_client <command> --help' for the flags of a command.\n";

// How every command reaches the server: the address, the API key (`authorization` metadata) and
// TLS. The same flag names as `llm loadtest` and the Python client.
struct Connection {
  std::string server = "localhost:50051";
  std::string api_key;  // default: LLM_API_KEY
  std::string tls_ca;   // PEM roots: connect with TLS

  void Register(FlagSet& flags) {
    flags.String("server", &server, "the server's gRPC address, HOST:PORT");
    flags.String("api-key", &api_key, "the server's --api-key (default: the LLM_API_KEY environment variable)");
    flags.String("tls-ca", &tls_ca, "connect with TLS, trusting this PEM certificate (the server's, or its CA's)");
  }
  // Fills the defaults that come from the environment; a usage error when a file is unreadable.
  std::optional<int> Finish();
  std::shared_ptr<grpc::Channel> Channel() const;
  // Adds the API key to a call.
  void Prepare(grpc::ClientContext& context) const {
    if (!api_key.empty()) context.AddMetadata("authorization", "Bearer " + api_key);
  }

  std::string ca_pem;
};

int CallFailed(const grpc::Status& status) {
  static const char* kCodes[] = {
      "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
      "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
      "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
      "DATA_LOSS", "UNAUTHENTICATED"};
  const int code = status.error_code();
  std::fprintf(stderr, "%s: %s: %s\n", kProgram, code >= 0 && code <= 16 ? kCodes[code] : "?",
               status.error_message().c_str());
  return 1;
}

int Usage(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kProgram, message.c_str());
  return 2;
}

std::optional<int> Connection::Finish() {
  if (api_key.empty())
    if (const char* key = std::getenv("LLM_API_KEY")) api_key = key;
  if (!tls_ca.empty()) {
    std::ifstream in(tls_ca, std::ios::binary);
    if (!in) return Usage("--tls-ca: cannot read '" + tls_ca + "'");
    std::stringstream ss;
    ss << in.rdbuf();
    ca_pem = ss.str();
  }
  return std::nullopt;
}

std::shared_ptr<grpc::Channel> Connection::Channel() const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!tls_ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ca_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  return grpc::CreateCustomChannel(server, credentials, args);
}

bool ParseIds(const std::string& text, std::vector<int32_t>* ids) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    int32_t id;
    if (!absl::SimpleAtoi(part, &id)) return false;
    ids->push_back(id);
  }
  return true;
}

std::string FinishReasonName(v1::FinishReason reason) {
  std::string name = v1::FinishReason_Name(reason);
  const std::string prefix = "FINISH_REASON_";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

nlohmann::json ToJson(const v1::GenerateResponse& r) {
  nlohmann::json logprobs = nlohmann::json::array();
  for (const v1::TokenLogprobs& lp : r.logprobs()) {
    nlohmann::json top = nlohmann::json::array();
    for (const v1::TokenLogprob& t : lp.top())
      top.push_back({{"token_id", t.token_id()}, {"logprob", t.logprob()}});
    logprobs.push_back({{"token_id", lp.token_id()}, {"logprob", lp.logprob()}, {"top", top}});
  }
  return {{"request_id", r.request_id()},
          {"token_ids", std::vector<int32_t>(r.token_ids().begin(), r.token_ids().end())},
          {"text", r.text()},
          {"finish_reason", FinishReasonName(r.finish_reason())},
          {"usage",
           {{"prompt_tokens", r.usage().prompt_tokens()},
            {"completion_tokens", r.usage().completion_tokens()},
            {"preemptions", r.usage().preemptions()},
            {"cached_prompt_tokens", r.usage().cached_prompt_tokens()}}},
          {"timings_ms",
           {{"queue", r.timings().queue_ms()},
            {"time_to_first_token", r.timings().time_to_first_token_ms()},
            {"decode", r.timings().decode_ms()},
            {"total", r.timings().total_ms()}}},
          {"logprobs", logprobs}};
}

// Appends a streamed response to the running total (what Complete would have answered).
void Accumulate(const v1::GenerateResponse& part, v1::GenerateResponse* total) {
  const std::string text = total->text() + part.text();
  const auto ids = total->token_ids();
  const auto logprobs = total->logprobs();
  *total = part;
  total->set_text(text);
  total->mutable_token_ids()->Clear();
  total->mutable_token_ids()->Add(ids.begin(), ids.end());
  total->mutable_token_ids()->Add(part.token_ids().begin(), part.token_ids().end());
  *total->mutable_logprobs() = logprobs;
  total->mutable_logprobs()->MergeFrom(part.logprobs());
}

int RunGenerate(int argc, char** argv) {
  FlagSet flags("generate", "Generates a continuation of a prompt on an `llm serve` server.", kProgram);
  Connection connection;
  std::string prompt, prompt_ids, request_id, stop_ids, logit_bias;
  int64_t max_tokens = 16, min_tokens = 0, top_k = 0, seed = 0, logprobs = 0, priority = 0, timeout_ms = 0;
  double temperature = 1.0, top_p = 1.0, min_p = 0.0, repetition = 1.0, presence = 0.0, frequency = 0.0;
  bool ignore_eos = false, unary = false, json = false, no_special = false;
  std::vector<std::string> stop;
  connection.Register(flags);
  flags.String("prompt", &prompt, "prompt text (the server's model needs a tokenizer)");
  flags.String("prompt-ids", &prompt_ids, "prompt as comma-separated token ids");
  flags.Bool("no-special-tokens", &no_special, "do not add special tokens (e.g. BOS) to --prompt");
  flags.Int("max-tokens", &max_tokens, "tokens to generate at most");
  flags.Int("min-tokens", &min_tokens, "tokens to generate before EOS or a stop may end the output");
  flags.Float("temperature", &temperature, "sampling temperature; 0 is greedy");
  flags.Int("top-k", &top_k, "keep the k most likely tokens (0 or -1: off)");
  flags.Float("top-p", &top_p, "nucleus sampling mass in (0, 1]");
  flags.Float("min-p", &min_p, "drop tokens below min-p x the top probability");
  flags.Float("repetition-penalty", &repetition, "penalty on tokens already seen (1: off)");
  flags.Float("presence-penalty", &presence, "penalty on tokens already generated");
  flags.Float("frequency-penalty", &frequency, "penalty per occurrence of a generated token");
  flags.Int("seed", &seed, "random seed (unset: random)");
  flags.String("logit-bias", &logit_bias, "comma-separated ID:BIAS pairs added to those tokens' logits ([-100, 100])");
  flags.Int("logprobs", &logprobs, "top log-probabilities per token (0-20)");
  flags.StringList("stop", &stop, "stop string");
  flags.String("stop-token-ids", &stop_ids, "comma-separated token ids that end generation");
  flags.Bool("ignore-eos", &ignore_eos, "keep generating past end-of-sequence");
  flags.Int("priority", &priority, "scheduling priority (higher first)");
  flags.String("request-id", &request_id, "an id echoed back in the responses");
  flags.Int("timeout-ms", &timeout_ms, "the call's deadline in milliseconds (0: none)");
  flags.Bool("unary", &unary, "call Complete (one response) instead of streaming Generate");
  flags.Bool("json", &json, "print the result as one JSON object instead of streaming text");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (auto exit_code = connection.Finish()) return *exit_code;
  if (flags.IsSet("prompt") == flags.IsSet("prompt-ids"))
    return Usage("give exactly one of --prompt and --prompt-ids");

  v1::GenerateRequest request;
  request.set_request_id(request_id);
  if (flags.IsSet("prompt")) {
    request.set_text(prompt);
    if (no_special) request.set_add_special_tokens(false);
  } else {
    std::vector<int32_t> ids;
    if (!ParseIds(prompt_ids, &ids)) return Usage("--prompt-ids: expected comma-separated integers");
    request.mutable_token_ids()->mutable_ids()->Add(ids.begin(), ids.end());
  }
  v1::SamplingParams* s = request.mutable_sampling();
  // Fields left unset take the server's defaults (the model's generation_config.json).
  if (flags.IsSet("temperature")) s->set_temperature(static_cast<float>(temperature));
  if (flags.IsSet("top-k")) s->set_top_k(static_cast<int32_t>(top_k));
  if (flags.IsSet("top-p")) s->set_top_p(static_cast<float>(top_p));
  if (flags.IsSet("min-p")) s->set_min_p(static_cast<float>(min_p));
  if (flags.IsSet("repetition-penalty")) s->set_repetition_penalty(static_cast<float>(repetition));
  s->set_presence_penalty(static_cast<float>(presence));
  s->set_frequency_penalty(static_cast<float>(frequency));
  if (flags.IsSet("seed")) s->set_seed(static_cast<uint64_t>(seed));
  auto biases = ParseLogitBiasFlag(logit_bias);
  if (!biases.ok()) return Usage(std::string(biases.status().message()));
  for (const auto& [token, bias] : *biases)  // the request's map cannot hold a token twice
    if (!s->mutable_logit_bias()->insert({token, bias}).second)
      return Usage(absl::StrCat("--logit-bias names token ", token, " twice"));
  v1::StoppingCriteria* st = request.mutable_stopping();
  st->set_max_tokens(static_cast<int32_t>(max_tokens));
  st->set_min_tokens(static_cast<int32_t>(min_tokens));
  st->set_ignore_eos(ignore_eos);
  for (const std::string& text : stop) st->add_stop(text);
  std::vector<int32_t> stop_token_ids;
  if (!ParseIds(stop_ids, &stop_token_ids))
    return Usage("--stop-token-ids: expected comma-separated integers");
  st->mutable_stop_token_ids()->Add(stop_token_ids.begin(), stop_token_ids.end());
  request.set_top_logprobs(static_cast<int32_t>(logprobs));
  request.set_priority(static_cast<int32_t>(priority));

  auto stub = v1::Llm::NewStub(connection.Channel());
  // A model without a tokenizer answers token ids only: print those instead of text.
  bool show_ids = false;
  if (!json) {
    grpc::ClientContext info_context;
    connection.Prepare(info_context);
    v1::ModelInfoResponse info;
    const grpc::Status s = stub->ModelInfo(&info_context, v1::ModelInfoRequest(), &info);
    if (!s.ok()) return CallFailed(s);
    show_ids = !info.has_tokenizer();
  }
  grpc::ClientContext context;
  connection.Prepare(context);
  if (timeout_ms > 0)
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  v1::GenerateResponse total;
  grpc::Status status;
  if (unary) {
    status = stub->Complete(&context, request, &total);
    if (status.ok() && !json) {
      if (show_ids)
        for (int32_t id : total.token_ids()) std::printf("[%d]", id);
      else
        std::fputs(total.text().c_str(), stdout);
    }
  } else {
    auto reader = stub->Generate(&context, request);
    v1::GenerateResponse part;
    while (reader->Read(&part)) {
      Accumulate(part, &total);
      if (json) continue;
      if (show_ids)
        for (int32_t id : part.token_ids()) std::printf("[%d]", id);
      else
        std::fputs(part.text().c_str(), stdout);
      std::fflush(stdout);
    }
    status = reader->Finish();
  }
  if (!status.ok()) {
    if (!json) std::printf("\n");
    return CallFailed(status);
  }
  if (json) {
    std::printf("%s\n", ToJson(total).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
    // Asked-for log-probabilities are printed, not dropped: one JSON line after the text.
    if (logprobs > 0) std::printf("%s\n", nlohmann::json({{"logprobs", ToJson(total)["logprobs"]}}).dump().c_str());
    std::fflush(stdout);
    std::fprintf(stderr,
                 "[finish: %s; %d prompt + %d generated tokens; first token %.1f ms, total %.1f ms]\n",
                 FinishReasonName(total.finish_reason()).c_str(), total.usage().prompt_tokens(),
                 total.usage().completion_tokens(), total.timings().time_to_first_token_ms(),
                 total.timings().total_ms());
  }
  return 0;
}

int RunTokenize(int argc, char** argv) {
  FlagSet flags("tokenize", "Prints the server model's token ids of a text as JSON.", kProgram);
  Connection connection;
  std::string text;
  bool no_special = false;
  connection.Register(flags);
  flags.String("text", &text, "the text");
  flags.Bool("no-special-tokens", &no_special, "do not add special tokens (e.g. BOS)");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (auto exit_code = connection.Finish()) return *exit_code;
  v1::TokenizeRequest request;
  request.set_text(text);
  if (no_special) request.set_add_special_tokens(false);
  v1::TokenizeResponse response;
  grpc::ClientContext context;
  connection.Prepare(context);
  const grpc::Status status = v1::Llm::NewStub(connection.Channel())->Tokenize(&context, request, &response);
  if (!status.ok()) return CallFailed(status);
  std::printf("%s\n", nlohmann::json({{"token_ids", std::vector<int32_t>(response.token_ids().begin(),
                                                                         response.token_ids().end())}})
                          .dump()
                          .c_str());
  return 0;
}

int RunDetokenize(int argc, char** argv) {
  FlagSet flags("detokenize", "Prints the text of token ids.", kProgram);
  Connection connection;
  std::string ids_text;
  bool skip_special = false;
  connection.Register(flags);
  flags.String("ids", &ids_text, "comma-separated token ids");
  flags.Bool("skip-special-tokens", &skip_special, "leave special tokens out");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (auto exit_code = connection.Finish()) return *exit_code;
  std::vector<int32_t> ids;
  if (!ParseIds(ids_text, &ids)) return Usage("--ids: expected comma-separated integers");
  v1::DetokenizeRequest request;
  request.mutable_token_ids()->Add(ids.begin(), ids.end());
  request.set_skip_special_tokens(skip_special);
  v1::DetokenizeResponse response;
  grpc::ClientContext context;
  connection.Prepare(context);
  const grpc::Status status = v1::Llm::NewStub(connection.Channel())->Detokenize(&context, request, &response);
  if (!status.ok()) return CallFailed(status);
  std::printf("%s\n", response.text().c_str());
  return 0;
}

int RunInfo(int argc, char** argv) {
  FlagSet flags("info", "Prints what the server serves (ModelInfo) as text.", kProgram);
  Connection connection;
  connection.Register(flags);
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (auto exit_code = connection.Finish()) return *exit_code;
  v1::ModelInfoResponse response;
  grpc::ClientContext context;
  connection.Prepare(context);
  const grpc::Status status =
      v1::Llm::NewStub(connection.Channel())->ModelInfo(&context, v1::ModelInfoRequest(), &response);
  if (!status.ok()) return CallFailed(status);
  std::printf("%s", response.DebugString().c_str());
  return 0;
}

int RunHealth(int argc, char** argv) {
  FlagSet flags("health", "Prints the server's grpc.health.v1 status; exit 0 only when SERVING.", kProgram);
  Connection connection;
  connection.Register(flags);
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (auto exit_code = connection.Finish()) return *exit_code;
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  const grpc::Status status = grpc::health::v1::Health::NewStub(connection.Channel())
                                  ->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
  if (!status.ok()) return CallFailed(status);
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status()).c_str());
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

struct Command {
  const char* name;
  int (*run)(int, char**);
};

constexpr Command kCommands[] = {
    {"generate", RunGenerate}, {"tokenize", RunTokenize}, {"detokenize", RunDetokenize},
    {"info", RunInfo},         {"health", RunHealth},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("%s %s\n", kProgram, llm::cli::VersionString().c_str());
    return 0;
  }
  for (const Command& c : kCommands)
    if (std::strcmp(argv[1], c.name) == 0) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "%s: unknown command '%s'\n\n%s", kProgram, argv[1], kUsage);
  return 2;
}
