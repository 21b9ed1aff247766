// Test support for end-to-end server tests: runs the real `llm serve` as a child process on free
// ports, talks to it over gRPC, and reads its Prometheus metrics over HTTP.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "llm/v1/llm.grpc.pb.h"

namespace llm::testing {

class ServerProcess {
 public:
  // Starts `llm serve --host 127.0.0.1 --port 0 --metrics-port 0 --http-port 0 --max-priority 1
  // --threads 2 <args>` and waits
  // for its "serving" line. Fails the test (and returns null) when it does not come up.
  static std::unique_ptr<ServerProcess> Start(const std::vector<std::string>& args);
  // The same under `mpirun -np ranks` (tensor/pipeline parallel serving; rank 0 serves gRPC).
  static std::unique_ptr<ServerProcess> StartMpi(int ranks, const std::vector<std::string>& args);
  ~ServerProcess();  // SIGKILL if still running

  std::string address() const;
  int metrics_port() const { return metrics_port_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  std::unique_ptr<v1::Llm::Stub> NewStub() const { return v1::Llm::NewStub(channel_); }
  // A channel on a connection of its own (as another client's would be: not behind this one's
  // streams).
  std::shared_ptr<grpc::Channel> NewChannel() const;

  // GET /metrics, parsed: "name{labels}" -> value (the model_name label left out).
  std::map<std::string, double> Metrics() const;
  double Metric(const std::string& name) const;
  // grpc.health.v1 Check("") (on `channel`, else this process's channel).
  grpc::health::v1::HealthCheckResponse::ServingStatus Health(
      const std::shared_ptr<grpc::Channel>& channel = nullptr) const;
  // GET /health on the metrics port: true for 200.
  bool HttpHealthy() const;

  // A front end's (--workers) worker ranks of `replica` in its newest launch: world rank -> pid,
  // found among the processes of the launch's session. Empty while none runs.
  std::map<int, pid_t> WorkerRanks(int replica = 0) const;
  pid_t pid() const { return pid_; }

  void Signal(int sig) const;
  // Waits for the process to exit; its exit code, or -1 on timeout or death by a signal.
  int WaitForExit(absl::Duration timeout);
  // stderr so far.
  std::string Log() const;

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string stderr_path_;
  std::shared_ptr<grpc::Channel> channel_;
};

// `mpirun ... -np ranks` as a front end's --workers prefix, with the flags this machine's tests
// need (oversubscription, root, no cross-memory attach).
std::string MpirunPrefix(int ranks);
// A client channel to `address` on a connection of its own (as another client's would be), taking
// messages up to 64 MiB.
std::shared_ptr<grpc::Channel> NewClientChannel(const std::string& address);

// One Generate or Complete call's outcome.
struct CallResult {
  grpc::Status status;
  std::vector<v1::GenerateResponse> parts;  // as received (Complete: one)
  v1::GenerateResponse merged;              // the parts concatenated (token ids, text, logprobs; last fields)
};

CallResult Stream(v1::Llm::Stub& stub, const v1::GenerateRequest& request,
                  absl::Duration timeout = absl::Seconds(60));
CallResult Complete(v1::Llm::Stub& stub, const v1::GenerateRequest& request,
                    absl::Duration timeout = absl::Seconds(60));

// A request for token-id `prompt`: greedy, EOS ignored, `max_tokens` tokens.
v1::GenerateRequest GreedyIds(const std::vector<int32_t>& prompt, int max_tokens);
std::vector<int32_t> Ids(const v1::GenerateResponse& response);

// A model folder that is the llama-tiny fixture plus a byte-level BPE tokenizer.json covering its
// whole vocabulary (256 byte tokens, 127 merges, one special token), made once per process.
std::string TokenizerModelDir();

// Polls `condition` every 10 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout);

}  // namespace llm::testing
