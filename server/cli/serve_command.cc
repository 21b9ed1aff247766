// llm serve: serves a model over gRPC (llm.v1.Llm, grpc.health.v1, reflection) with Prometheus
// metrics over HTTP, until SIGTERM or SIGINT. Then it drains: health turns NOT_SERVING, new
// generations are refused with UNAVAILABLE, running ones finish (cancelled after
// --drain-timeout-s, or at once on a second signal), and the process exits 0.
//
// With one rank the gRPC port opens before the model loads (health NOT_SERVING meanwhile); under
// mpirun the ranks load together first, then world rank 0 serves and the others run steps.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "server/cli/commands.h"
#include "server/cli/model_flags.h"
#include "server/grpc/grpc_server.h"
#include "server/grpc/llm_service.h"
#include "server/grpc/metrics_http_server.h"
#include "server/grpc/proto_conversion.h"
#include "server/grpc/serving_state.h"

namespace llm::cli {
namespace {

struct ServeFlags {
  std::string host = "0.0.0.0";
  int64_t port = 50051;
  int64_t metrics_port = 9090;
  int64_t max_message_bytes = 4 << 20;
  int64_t drain_timeout_s = 60;
  std::string chat_template;  // overrides the model's chat template
};

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
  absl::Status Start(const ServeFlags& flags, server::LlmService& service, server::ServingState& state) {
    server::GrpcServerOptions options;
    options.host = flags.host;
    options.port = static_cast<int>(flags.port);
    options.max_message_bytes = flags.max_message_bytes;
    auto grpc = server::GrpcServer::Start(options, &service);
    if (!grpc.ok()) return grpc.status();
    grpc_ = *std::move(grpc);
    if (flags.metrics_port >= 0) {
      auto metrics = server::MetricsHttpServer::Start(flags.host, static_cast<int>(flags.metrics_port),
                                                      [&state] { return state.RenderMetrics(); });
      if (!metrics.ok()) return metrics.status();
      metrics_ = *std::move(metrics);
    }
    std::printf("llm serve: listening on %s (health NOT_SERVING until the model is loaded)\n",
                grpc_->address().c_str());
    std::fflush(stdout);
    return absl::OkStatus();
  }
  bool started() const { return grpc_ != nullptr; }
  server::GrpcServer& grpc() { return *grpc_; }
  std::string MetricsUrl(const std::string& host) const {
    return metrics_ ? absl::StrCat("http://", host, ":", metrics_->port(), "/metrics") : "off";
  }
  void Stop(absl::Duration grace) {
    if (grpc_) grpc_->Shutdown(grace);
    metrics_.reset();
  }

 private:
  std::unique_ptr<server::GrpcServer> grpc_;
  std::unique_ptr<server::MetricsHttpServer> metrics_;
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

}  // namespace

int RunServe(int argc, char** argv) {
  FlagSet flags(
      "serve",
      "Serves a model over gRPC (llm.v1.Llm, grpc.health.v1, reflection) with Prometheus metrics over\n"
      "HTTP. SIGTERM/SIGINT/SIGUSR1 drain: new requests are refused, running ones finish, then exit 0 (under mpirun, send SIGUSR1 to mpirun or SIGTERM to rank 0).");
  ModelFlags model;
  model.Register(flags);
  ServeFlags serve;
  flags.String("host", &serve.host, "address to listen on (gRPC and metrics)");
  flags.Int("port", &serve.port, "gRPC port (0: any free port, printed at start)");
  flags.Int("metrics-port", &serve.metrics_port, "Prometheus /metrics HTTP port (0: any free port, -1: off)");
  flags.Int("max-queue", &model.max_queue, "waiting requests before new ones get RESOURCE_EXHAUSTED");
  flags.Int("max-message-bytes", &serve.max_message_bytes, "largest gRPC message accepted or sent");
  flags.Int("drain-timeout-s", &serve.drain_timeout_s,
            "on SIGTERM, seconds running requests may take to finish");
  flags.String("chat-template", &serve.chat_template,
               "chat template for the Chat RPC (Jinja file, or JSON with \"chat_template\"), instead of the model's");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (absl::Status s = model.Validate(); !s.ok()) return Fail(s, 2);
  if (model.ModelDir().empty())
    return Fail(
        absl::InvalidArgumentError(
            "--model is required: the repository's default model (launch/model) is not in this build"),
        2);
  if (model.max_queue < 1) return Fail(absl::InvalidArgumentError("--max-queue must be at least 1"), 2);

  const sigset_t signals = BlockShutdownSignals();
  server::ServingState state;
  server::LlmService service(state);
  Endpoints endpoints;
  if (!model.Distributed()) {
    if (absl::Status s = endpoints.Start(serve, service, state); !s.ok()) return Fail(s, 1);
  }
  auto handle = Deploy(model, &argc, &argv);
  if (!handle.ok()) return Fail(handle.status(), 1);
  if ((*handle)->engine() == nullptr) {  // a worker rank of an mpirun group: runs steps for rank 0
    absl::Status s = (*handle)->RunWorker();
    return s.ok() ? 0 : Fail(s, 1);
  }
  if (!endpoints.started()) {
    if (absl::Status s = endpoints.Start(serve, service, state); !s.ok()) return Fail(s, 1);
  }
  Engine& engine = *(*handle)->engine();
  server::Deployment deployment;
  deployment.model_name = std::filesystem::path(model.ModelDir()).lexically_normal().filename().string();
  if (deployment.model_name.empty())
    deployment.model_name =
        std::filesystem::path(model.ModelDir()).lexically_normal().parent_path().filename().string();
  deployment.device = model.device;
  deployment.tensor_parallel = static_cast<int32_t>(model.tp);
  deployment.pipeline_parallel = static_cast<int32_t>(model.pp);
  deployment.max_queue = static_cast<int32_t>(model.max_queue);
  deployment.max_message_bytes = serve.max_message_bytes;
  const EngineInfo& info = engine.info();
  server::ServedModel served{&engine, (*handle)->tokenizer(),
                             server::ToModelInfo(info, (*handle)->tokenizer().get(), deployment)};
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
  std::printf(
      "llm serve: serving %s (%s, %lld layers, vocab %lld, context %lld, %s, tp %lld pp %lld%s) on %s; "
      "KV cache %d blocks x %d tokens; up to %d sequences and %d tokens a step; metrics %s\n",
      deployment.model_name.c_str(), info.config.model_type.c_str(),
      static_cast<long long>(info.config.num_layers), static_cast<long long>(info.config.vocab_size),
      static_cast<long long>(info.max_context), model.device.c_str(), static_cast<long long>(model.tp),
      static_cast<long long>(model.pp), (*handle)->tokenizer() ? "" : ", no tokenizer: token ids only",
      endpoints.grpc().address().c_str(), info.kv_blocks, info.kv_block_size, info.max_seqs,
      info.max_tokens_per_step,
      endpoints.MetricsUrl(serve.host).c_str());
  std::fflush(stdout);

  const int sig = WaitForSignal(signals, absl::InfiniteDuration());
  std::fprintf(stderr, "llm serve: %s received\n", sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "SIGTERM");
  Drain(signals, absl::Seconds(serve.drain_timeout_s), state, engine, endpoints);
  return 0;
}

}  // namespace llm::cli
