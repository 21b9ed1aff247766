// llm serve: serves a model over gRPC (llm.v1.Llm, grpc.health.v1, reflection) and over an
// OpenAI-compatible HTTP API (with /health and Prometheus /metrics), both from one engine, until
// SIGTERM or SIGINT. Then it drains: health turns NOT_SERVING (HTTP 503), new generations are
// refused with UNAVAILABLE (503), running ones finish (cancelled after --drain-timeout-s, or at
// once on a second signal), and the process exits 0.
//
// Safe by default: both APIs listen on 127.0.0.1 unless --host says otherwise, with an API key
// (--api-key) and TLS (--tls-cert/--tls-key) when asked; a port in use is an error.
//
// With one rank the ports open before the model loads (health NOT_SERVING meanwhile); under
// mpirun the ranks load together first, then world rank 0 serves and the others run steps (the
// mode without survival: a dead rank ends the job; a broken group ends the process with status 1).
// With --workers the process is a front end outside any MPI job: it launches each replica's worker
// group, restarts one that dies or hangs and resumes its requests (engine/distributed/front_end.h);
// health reads NOT_SERVING while no replica runs steps.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/distributed/front_end.h"
#include "engine/model/generation_config.h"
#include "server/cli/commands.h"
#include "server/cli/model_flags.h"
#include "server/grpc/grpc_server.h"
#include "server/grpc/llm_service.h"
#include "server/grpc/proto_conversion.h"
#include "server/grpc/serving_state.h"
#include "server/http/http_server.h"
#include "server/http/openai_api.h"

namespace llm::cli {
namespace {

struct ServeFlags {
  std::string host = "127.0.0.1";
  int64_t port = 50051;
  int64_t http_port = 8000;
  int64_t metrics_port = -1;
  int64_t max_message_bytes = 4 << 20;
  int64_t drain_timeout_s = 60;
  std::string chat_template;  // overrides the model's chat template
  std::string api_key;
  std::string tls_cert;
  std::string tls_key;
  std::string served_model_name;
  std::string generation_config = "auto";
  int64_t max_priority = 0;
  int64_t http_threads = 2;
  // The front end outside the MPI job (--workers): one launch prefix per replica, or one for all.
  std::vector<std::string> workers;
  int64_t replicas = 1;
  std::string worker_address = "127.0.0.1:0";
  int64_t worker_timeout_s = 30;
  int64_t worker_start_timeout_s = 600;
  int64_t worker_restarts = 5;

  bool front_end() const { return !workers.empty(); }

  absl::Status Validate() const {
    for (const auto& [name, value] : {std::pair{"port", port}, std::pair{"http-port", http_port},
                                      std::pair{"metrics-port", metrics_port}})
      if (value < -1 || value > 65535)
        return absl::InvalidArgumentError(absl::StrCat("--", name, " must be in [0, 65535] (or -1: off), got ", value));
    if (port < 0) return absl::InvalidArgumentError("--port must be in [0, 65535]");
    if (max_message_bytes < 1024 || max_message_bytes > INT32_MAX)
      return absl::InvalidArgumentError(
          absl::StrCat("--max-message-bytes must be in [1024, ", INT32_MAX, "] (the message size limit), got ",
                       max_message_bytes));
    if (tls_cert.empty() != tls_key.empty())
      return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
    for (const auto& [name, path] : {std::pair{"tls-cert", tls_cert}, std::pair{"tls-key", tls_key}})
      if (!path.empty() && !std::ifstream(path).good())
        return absl::InvalidArgumentError(absl::StrCat("--", name, ": cannot read '", path, "'"));
    if (max_priority < INT32_MIN || max_priority > INT32_MAX)
      return absl::InvalidArgumentError("--max-priority is out of range");
    if (http_threads < 1 || http_threads > 64)
      return absl::InvalidArgumentError("--http-threads must be in [1, 64]");
    if (served_model_name.find_first_of(" \t\n\"") != std::string::npos)
      return absl::InvalidArgumentError("--served-model-name must not contain spaces or quotes");
    if (replicas < 1 || replicas > 64) return absl::InvalidArgumentError("--replicas must be in [1, 64]");
    if (!front_end() && replicas > 1)
      return absl::InvalidArgumentError("--replicas needs --workers: each replica is a worker group the front end launches");
    if (front_end() && workers.size() != 1 && static_cast<int64_t>(workers.size()) != replicas)
      return absl::InvalidArgumentError(absl::StrCat("--workers is given ", workers.size(), " times for ", replicas,
                                                     " replicas: give it once (every replica) or once per replica"));
    if (front_end() && MpiRuntime::LaunchedByMpiLauncher())
      return absl::InvalidArgumentError(
          "llm serve --workers is an ordinary process that launches its worker groups itself: run it without mpirun "
          "(put mpirun into --workers, e.g. --workers \"mpirun -np 2\")");
    if (worker_timeout_s < 1 || worker_start_timeout_s < 1)
      return absl::InvalidArgumentError("--worker-timeout-s and --worker-start-timeout-s must be at least 1");
    if (worker_restarts < 0) return absl::InvalidArgumentError("--worker-restarts must not be negative");
    if (const size_t colon = worker_address.rfind(':');
        colon == std::string::npos || colon == 0 || !absl::SimpleAtoi(worker_address.substr(colon + 1), &worker_port_) ||
        worker_port_ < 0 || worker_port_ > 65535)
      return absl::InvalidArgumentError(absl::StrCat("--worker-address must be HOST:PORT (PORT 0: any), got '",
                                                     worker_address, "'"));
    return absl::OkStatus();
  }
  std::string worker_host() const { return worker_address.substr(0, worker_address.rfind(':')); }
  mutable int worker_port_ = 0;
};

// The sampling defaults requests get: generation_config.json of the model folder (or of the
// folder --generation-config names), none with --generation-config ignore.
absl::StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::string& choice, const std::string& model_dir) {
  if (choice == "ignore" || choice == "vllm") return GenerationDefaults();
  // A folder named by the operator must hold the file (the model's own may lack one).
  if (choice != "auto" && !std::filesystem::exists(std::filesystem::path(choice) / "generation_config.json"))
    return absl::InvalidArgumentError(
        absl::StrCat("--generation-config: no generation_config.json in '", choice, "' (auto, ignore or a folder)"));
  absl::StatusOr<GenerationDefaults> d = ReadGenerationDefaults(choice == "auto" ? model_dir : choice);
  if (!d.ok()) return absl::InvalidArgumentError(absl::StrCat("--generation-config: ", d.status().message()));
  return d;
}

// The model's name for clients: --served-model-name, else the folder's name.
std::string ServedName(const ServeFlags& serve, const std::string& model_dir) {
  if (!serve.served_model_name.empty()) return serve.served_model_name;
  const std::filesystem::path dir = std::filesystem::path(model_dir).lexically_normal();
  std::string name = dir.filename().string();
  if (name.empty()) name = dir.parent_path().filename().string();
  return name;
}

// This binary, for the worker groups a front end launches.
std::string SelfExecutable() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("llm") : self.string();
}

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "llm serve: %s\n", std::string(status.message()).c_str());
  return code;
}

// Blocks SIGTERM and SIGINT in this thread and, by inheritance, every thread started later, so
// that only WaitForSignal sees them (and worker ranks ignore them: rank 0 ends the group).
sigset_t BlockShutdownSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  // mpirun forwards SIGUSR1 to every rank and keeps the job alive (it turns SIGTERM into a kill
  // of the whole job): `kill -USR1 <mpirun>` drains a multi-rank server cleanly.
  sigaddset(&set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  return set;
}

// Every HTTP connection and gRPC stream holds a descriptor: thousands of clients need more than
// the usual soft limit of 1024, so take what the hard limit allows.
void RaiseOpenFileLimit() {
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) != 0 || files.rlim_cur >= files.rlim_max) return;
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
}

// Waits up to `timeout` (forever when infinite) for a blocked signal in `set`; 0 when none came.
int WaitForSignal(const sigset_t& set, absl::Duration timeout) {
  for (;;) {
    int rc;
    if (timeout == absl::InfiniteDuration()) {
      int sig = 0;
      rc = sigwait(&set, &sig) == 0 ? sig : -1;
    } else {
      const timespec ts = absl::ToTimespec(timeout);
      rc = sigtimedwait(&set, nullptr, &ts);
      if (rc < 0 && errno == EAGAIN) return 0;
    }
    if (rc > 0) return rc;
  }
}

class Endpoints {
 public:
  absl::Status Start(const ServeFlags& flags, server::LlmService& service, server::ServingState& state,
                     server::OpenAiApi& api) {
    server::GrpcServerOptions options;
    options.host = flags.host;
    options.port = static_cast<int>(flags.port);
    options.max_message_bytes = flags.max_message_bytes;
    options.tls_cert_file = flags.tls_cert;
    options.tls_key_file = flags.tls_key;
    auto grpc = server::GrpcServer::Start(options, &service);
    if (!grpc.ok()) return grpc.status();
    grpc_ = *std::move(grpc);
    server::HttpServerOptions http;
    http.host = flags.host;
    http.tls_cert_file = flags.tls_cert;
    http.tls_key_file = flags.tls_key;
    http.io_threads = static_cast<int>(flags.http_threads);
    if (flags.http_port >= 0) {
      http.port = static_cast<int>(flags.http_port);
      auto server = server::HttpServer::Start(
          http, [&api](server::HttpRequest r, std::shared_ptr<server::HttpResponder> w) { api.Handle(std::move(r), std::move(w)); });
      if (!server.ok()) return absl::Status(server.status().code(), absl::StrCat("--http-port: ", server.status().message()));
      http_ = *std::move(server);
    }
    if (flags.metrics_port >= 0) {
      http.port = static_cast<int>(flags.metrics_port);
      http.io_threads = 1;
      auto server = server::HttpServer::Start(http, [&api](server::HttpRequest r, std::shared_ptr<server::HttpResponder> w) {
        api.HandleMetricsOnly(std::move(r), std::move(w));
      });
      if (!server.ok())
        return absl::Status(server.status().code(), absl::StrCat("--metrics-port: ", server.status().message()));
      metrics_ = *std::move(server);
    }
    std::printf("llm serve: listening on %s (gRPC%s), %s (HTTP) (health NOT_SERVING until the model is loaded)\n",
                grpc_->address().c_str(), grpc_->tls() ? ", TLS" : "", HttpUrl().c_str());
    if (flags.host == "127.0.0.1" || flags.host == "localhost" || flags.host == "::1")
      std::printf("llm serve: reachable from this machine only; --host 0.0.0.0 serves other machines%s\n",
                  flags.api_key.empty() ? " (consider --api-key and --tls-cert/--tls-key then)" : "");
    std::fflush(stdout);
    return absl::OkStatus();
  }
  bool started() const { return grpc_ != nullptr; }
  server::GrpcServer& grpc() { return *grpc_; }
  std::string HttpUrl() const { return http_ ? http_->url() : "off"; }
  std::string MetricsUrl() const {
    if (metrics_) return metrics_->url() + "/metrics";
    return http_ ? http_->url() + "/metrics" : "off";
  }
  void Stop(absl::Duration grace) {
    if (grpc_) grpc_->Shutdown(grace);
    http_.reset();
    metrics_.reset();
  }

 private:
  std::unique_ptr<server::GrpcServer> grpc_;
  std::unique_ptr<server::HttpServer> http_;
  std::unique_ptr<server::HttpServer> metrics_;
};

// Drains after the first signal; see the file comment.
void Drain(const sigset_t& signals, absl::Duration timeout, server::ServingState& state, Engine& engine,
           Endpoints& endpoints) {
  state.StartDraining();
  endpoints.grpc().SetServing(false);
  std::fprintf(stderr, "llm serve: draining (new requests are refused; running ones finish)\n");
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + timeout;
  while (!state.WaitUntilIdle(absl::Milliseconds(50))) {
    if (WaitForSignal(signals, absl::ZeroDuration()) != 0) {
      std::fprintf(stderr, "llm serve: second signal: cancelling %d running requests\n", state.CancelAll());
    } else if (absl::Now() > give_up) {
      std::fprintf(stderr, "llm serve: drain timeout: cancelling %d running requests\n", state.CancelAll());
    }
  }
  engine.Shutdown(/*drain=*/true);
  std::fprintf(stderr, "llm serve: every request finished after %.0f ms\n",
               absl::ToDoubleMilliseconds(absl::Now() - start));
  // Every request has its last update; give the calls a moment to deliver it.
  if (!state.WaitForCallsDone(absl::Seconds(5)))
    std::fprintf(stderr, "llm serve: some calls did not end in time; they are cancelled\n");
  endpoints.Stop(absl::ZeroDuration());
  std::fprintf(stderr, "llm serve: stopped after %.0f ms\n", absl::ToDoubleMilliseconds(absl::Now() - start));
}

// The front end's engine: every replica's worker group launched with the model flags.
FrontEndOptions FrontEndFor(const ModelFlags& model, const ServeFlags& serve) {
  FrontEndOptions o;
  o.build = model.ToBuildOptions();
  std::vector<std::string> command = {SelfExecutable(), "worker"};
  const std::vector<std::string> args = model.ToArgs();
  command.insert(command.end(), args.begin(), args.end());
  for (int r = 0; r < serve.replicas; ++r) {
    WorkerGroupOptions g;
    g.launch_prefix = serve.workers.size() == 1 ? serve.workers[0] : serve.workers[r];
    g.worker_command = command;
    g.listen_host = serve.worker_host();
    g.listen_port = serve.worker_port_ == 0 ? 0 : serve.worker_port_ + r;
    g.start_timeout = absl::Seconds(serve.worker_start_timeout_s);
    g.step_timeout = absl::Seconds(serve.worker_timeout_s);
    g.max_restarts = static_cast<int>(serve.worker_restarts);
    o.replicas.push_back(std::move(g));
  }
  return o;
}

// Serves until a shutdown signal (returned), keeping gRPC health in step with the engine's
// (NOT_SERVING while no replica runs steps). An engine that will never serve again ends the
// process with status 1, after its requests got their errors: a supervisor restarts it.
int WatchUntilSignal(const sigset_t& signals, Engine& engine, server::ServingState& state, Endpoints& endpoints) {
  bool serving = true;
  for (;;) {
    if (const int sig = WaitForSignal(signals, absl::Milliseconds(100)); sig != 0) return sig;
    const absl::Status health = state.Health();
    if (health.ok() != serving) {
      serving = health.ok();
      endpoints.grpc().SetServing(serving);
      std::fprintf(stderr, "llm serve: health %s%s%s\n", serving ? "SERVING" : "NOT_SERVING", serving ? "" : ": ",
                   serving ? "" : std::string(health.message()).c_str());
    }
    if (engine.failed()) {
      std::fprintf(stderr, "llm serve: the engine cannot serve any more (%s); exiting\n",
                   std::string(engine.Health().message()).c_str());
      // The requests have their errors; give the calls a moment to deliver them.
      state.WaitForCallsDone(absl::Seconds(2));
      endpoints.Stop(absl::ZeroDuration());
      std::fflush(stdout);
      std::fflush(stderr);
      // Not a clean exit: the group's communicators are broken, and MPI must not wait for them.
      std::_Exit(1);
    }
  }
}

}  // namespace

int RunServe(int argc, char** argv) {
  FlagSet flags(
      "serve",
      "Serves a model over gRPC (llm.v1.Llm, grpc.health.v1, reflection) and over an OpenAI-compatible HTTP\n"
      "API (/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics), on 127.0.0.1 unless --host\n"
      "says otherwise. SIGTERM/SIGINT/SIGUSR1 drain: new requests are refused, running ones finish, then exit 0\n"
      "(under mpirun, send SIGUSR1 to mpirun or SIGTERM to rank 0).");
  ModelFlags model;
  model.Register(flags);
  ServeFlags serve;
  flags.String("host", &serve.host, "address every port listens on (0.0.0.0: all interfaces)");
  flags.Int("port", &serve.port, "gRPC port (0: any free port, printed at start)");
  flags.Int("http-port", &serve.http_port,
            "OpenAI-compatible HTTP port, also /health and /metrics (0: any free port, -1: off)");
  flags.Int("metrics-port", &serve.metrics_port,
            "a separate port for /metrics and /health only (0: any free port, -1: none; /metrics stays on --http-port)");
  flags.String("api-key", &serve.api_key,
               "require this key: HTTP 'Authorization: Bearer KEY', gRPC 'authorization: Bearer KEY' metadata "
               "(health and metrics exempt; default: the LLM_API_KEY environment variable, else none)");
  flags.String("tls-cert", &serve.tls_cert, "PEM certificate (chain): serve gRPC and HTTP over TLS (with --tls-key)");
  flags.String("tls-key", &serve.tls_key, "PEM private key of --tls-cert");
  flags.String("served-model-name", &serve.served_model_name,
               "the model's name in the APIs (OpenAI 'model', ModelInfo, metrics' model_name; default: the folder's)");
  flags.String("generation-config", &serve.generation_config,
               "sampling defaults for unset request fields: auto (the model's generation_config.json), ignore, or a "
               "folder holding a generation_config.json");
  flags.Int("max-priority", &serve.max_priority,
            "the highest scheduling priority a client may ask for (higher is refused; lower is always allowed)");
  flags.Int("http-threads", &serve.http_threads, "I/O threads of the HTTP server");
  flags.Int("max-queue", &model.max_queue, "waiting requests before new ones get RESOURCE_EXHAUSTED");
  flags.Int("max-message-bytes", &serve.max_message_bytes, "largest gRPC message accepted or sent");
  flags.Int("drain-timeout-s", &serve.drain_timeout_s,
            "on SIGTERM, seconds running requests may take to finish");
  flags.String("chat-template", &serve.chat_template,
               "chat template for the Chat RPC (Jinja file, or JSON with \"chat_template\"), instead of the model's");
  flags.StringList("workers", &serve.workers,
                   "run this process as a front end that survives its workers: it launches each replica's worker "
                   "group as 'PREFIX <this llm> worker ...' (e.g. \"mpirun -np 4 --hostfile hosts\"; \"\" for one "
                   "process), restarts a group that dies or hangs and resumes its requests; once, or once per replica");
  flags.Int("replicas", &serve.replicas, "worker groups of the model (with --workers); a request goes to the one that had its prompt's prefix, "
            "else the least loaded");
  flags.String("worker-address", &serve.worker_address,
               "HOST:PORT the front end listens on for its worker groups (replica r: PORT + r; PORT 0: any)");
  flags.Int("worker-timeout-s", &serve.worker_timeout_s,
            "the watchdog: seconds a worker group may take to return a step before it is replaced");
  flags.Int("worker-start-timeout-s", &serve.worker_start_timeout_s,
            "seconds a worker group may take to start and load the model");
  flags.Int("worker-restarts", &serve.worker_restarts,
            "restarts in a row (each waiting longer) before a replica gives up and its requests fail with UNAVAILABLE");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (absl::Status s = model.Validate(); !s.ok()) return Fail(s, 2);
  if (absl::Status s = serve.Validate(); !s.ok()) return Fail(s, 2);
  if (!flags.IsSet("api-key"))
    if (const char* key = std::getenv("LLM_API_KEY"); key != nullptr) serve.api_key = key;
  if (model.ModelDir().empty())
    return Fail(
        absl::InvalidArgumentError(
            "--model is required: the repository's default model (launch/model) is not in this build"),
        2);
  if (model.max_queue < 1) return Fail(absl::InvalidArgumentError("--max-queue must be at least 1"), 2);
  // Read before anything listens or loads, so that a bad file is a usage error at once.
  absl::StatusOr<GenerationDefaults> defaults = LoadGenerationDefaults(serve.generation_config, model.ModelDir());
  if (!defaults.ok()) return Fail(defaults.status(), 2);

  // The model folder and its config, before anything listens or loads: a usage error at once.
  if (absl::Status s = CheckModelFolder(model.ToBuildOptions()); !s.ok()) return Fail(s, 2);

  const sigset_t signals = BlockShutdownSignals();
  RaiseOpenFileLimit();
  server::ServingState state(serve.api_key);
  server::LlmService service(state);
  server::OpenAiApi api(state);
  Endpoints endpoints;
  if (!model.Distributed() || serve.front_end()) {
    if (absl::Status s = endpoints.Start(serve, service, state, api); !s.ok()) return Fail(s, 1);
  }
  // In-process: this process (world rank 0 of an mpirun group) holds the engine; a dead rank ends
  // the job. Front end: the engine is here, the model in worker groups it restarts.
  std::unique_ptr<Deployment> handle;
  std::unique_ptr<Engine> front_end;
  std::shared_ptr<const Tokenizer> tokenizer;
  if (serve.front_end()) {
    absl::StatusOr<std::shared_ptr<const Tokenizer>> loaded = LoadTokenizerIfPresent(model.ModelDir());
    if (!loaded.ok()) return Fail(loaded.status(), 1);
    tokenizer = *loaded;
    absl::StatusOr<std::unique_ptr<Engine>> created = CreateFrontEndEngine(FrontEndFor(model, serve), tokenizer);
    if (!created.ok())
      return Fail(created.status(),
                  absl::IsInvalidArgument(created.status()) || absl::IsFailedPrecondition(created.status()) ? 2 : 1);
    front_end = *std::move(created);
  } else {
    auto deployed = Deploy(model, &argc, &argv);
    if (!deployed.ok()) return Fail(deployed.status(), IsUsageError(deployed.status()) ? 2 : 1);
    handle = *std::move(deployed);
    if (handle->engine() == nullptr) {  // a worker rank of an mpirun group: runs steps for rank 0
      absl::Status s = handle->RunWorker();
      return s.ok() ? 0 : Fail(s, 1);
    }
    tokenizer = handle->tokenizer();
    if (!endpoints.started()) {
      if (absl::Status s = endpoints.Start(serve, service, state, api); !s.ok()) return Fail(s, 1);
    }
  }
  Engine& engine = front_end ? *front_end : *handle->engine();
  server::Deployment deployment;
  deployment.model_name = ServedName(serve, model.ModelDir());
  deployment.device = model.Device();
  deployment.tensor_parallel = static_cast<int32_t>(model.tp);
  deployment.pipeline_parallel = static_cast<int32_t>(model.pp);
  deployment.max_queue = static_cast<int32_t>(model.max_queue);
  deployment.max_message_bytes = serve.max_message_bytes;
  const EngineInfo& info = engine.info();
  server::ServedModel served;
  served.name = deployment.model_name;
  served.policy.defaults = *defaults;
  served.policy.max_priority = static_cast<int32_t>(serve.max_priority);
  served.policy.max_context = info.max_context;
  served.engine = &engine;
  served.tokenizer = tokenizer;
  served.info = server::ToModelInfo(info, tokenizer.get(), deployment);
  // The chat template, parsed once here for every Chat call; a model without one serves no Chat.
  absl::StatusOr<std::unique_ptr<ChatTemplate>> chat_template =
      ChatTemplate::ForModel(model.ModelDir(), serve.chat_template);
  if (chat_template.ok()) {
    served.chat_template = *std::move(chat_template);
  } else if (!serve.chat_template.empty() || chat_template.status().code() != absl::StatusCode::kNotFound) {
    return Fail(chat_template.status(), 2);
  }
  state.Attach(std::move(served));
  endpoints.grpc().SetServing(true);
  std::printf("llm serve: sampling defaults from %s: %s\n",
              serve.generation_config == "auto" ? "the model's generation_config.json"
              : serve.generation_config == "ignore" || serve.generation_config == "vllm"
                  ? "nowhere (--generation-config ignore)"
                  : serve.generation_config.c_str(),
              defaults->ToString().c_str());
  std::printf("llm serve: API key %s; priorities up to %lld\n", serve.api_key.empty() ? "off" : "required",
              static_cast<long long>(serve.max_priority));
  std::printf(
      "llm serve: serving %s (%s, %lld layers, vocab %lld, context %lld, %s, tp %lld pp %lld%s) on %s; "
      "HTTP %s; KV cache %d blocks x %d tokens; up to %d sequences and %d tokens a step; metrics %s\n",
      deployment.model_name.c_str(), info.config.model_type.c_str(),
      static_cast<long long>(info.config.num_layers), static_cast<long long>(info.config.vocab_size),
      static_cast<long long>(info.max_context), deployment.device.c_str(), static_cast<long long>(model.tp),
      static_cast<long long>(model.pp), tokenizer ? "" : ", no tokenizer: token ids only",
      endpoints.grpc().address().c_str(), endpoints.HttpUrl().c_str(), info.kv_blocks, info.kv_block_size,
      info.max_seqs, info.max_tokens_per_step, endpoints.MetricsUrl().c_str());
  std::fflush(stdout);

  if (serve.front_end())
    std::printf("llm serve: front end of %lld worker group(s): watchdog %llds, up to %lld restarts in a row\n",
                static_cast<long long>(serve.replicas), static_cast<long long>(serve.worker_timeout_s),
                static_cast<long long>(serve.worker_restarts));
  std::fflush(stdout);

  const int sig = WatchUntilSignal(signals, engine, state, endpoints);
  std::fprintf(stderr, "llm serve: %s received\n", sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM");
  Drain(signals, absl::Seconds(serve.drain_timeout_s), state, engine, endpoints);
  return 0;
}

}  // namespace llm::cli
