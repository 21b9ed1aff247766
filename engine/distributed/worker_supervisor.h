// WorkerGroupSupervisor: keeps one replica's worker group alive for a front end. It launches the
// group (WorkerGroupLauncher), waits for its rank 0 to connect back and checks its hello (session,
// settings, limits), hands the connection to the replica's executor, and when the executor or the
// launcher reports the group lost, kills what is left of it and starts a new one.
//
// Restarts: the first after a loss starts at once (recovery time is what clients wait); a group
// that dies again before it served `stable_after` counts as one more failure in a row, and each
// further restart waits `backoff`, doubling up to `max_backoff`. After `max_restarts` failures in
// a row it gives up: the executor turns gone (its requests fail with UNAVAILABLE and the last
// reason) and the supervisor stops.
//
// A restarted group must match the first: the same settings fingerprint (the model's files and
// every flag, settings_fingerprint.h) and the same limits, with its KV cache pinned to the first
// group's block count (--kv-cache-blocks), so the engine's scheduler, built once, fits it.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/distributed/worker_launcher.h"
#include "engine/distributed/worker_protocol.h"
#include "parallel/tcp_channel.h"

namespace llm {

struct WorkerGroupOptions {
  int replica = 0;
  std::string launch_prefix;                // prepended to the worker command ("": run it alone)
  std::vector<std::string> worker_command;  // <llm> worker <model flags>; the front end adds its own flags
  std::string listen_host = "127.0.0.1";    // where the front end waits for the group's rank 0
  int listen_port = 0;                      // 0: any free port
  std::string advertise_host;               // what the workers connect to ("": listen_host)
  absl::Duration start_timeout = absl::Seconds(600);  // launch to hello (MPI start-up, model load)
  absl::Duration step_timeout = absl::Seconds(30);    // the watchdog: a launched step's results
  int max_restarts = 5;
  absl::Duration backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(30);
  absl::Duration stable_after = absl::Seconds(60);
  // What the front end itself knows of the model (its config files' entries): the first group must
  // hold the same.
  SettingsFingerprint expected_settings;
};

// What the supervisor tells its replica's executor.
struct WorkerGroupEvents {
  // A checked group serves from now on, over `channel`.
  std::function<void(std::unique_ptr<TcpChannel> channel)> attach;
  // The group is lost (the launcher ended, say): stop using the channel.
  std::function<void(const absl::Status& why)> detach;
  // No group will serve again.
  std::function<void(const absl::Status& why)> gone;
};

class WorkerGroupSupervisor {
 public:
  // Launches the first group and waits for it (start-up fails fast with its error: a refused
  // setting, a model that does not load, a launch prefix that does not run).
  static absl::StatusOr<std::unique_ptr<WorkerGroupSupervisor>> Start(const WorkerGroupOptions& options);
  ~WorkerGroupSupervisor();  // Stop()

  // The first group's hello (its limits build the engine) and its connection, once.
  const WorkerHello& first_hello() const { return first_hello_; }
  std::unique_ptr<TcpChannel> TakeFirstChannel() { return std::move(first_channel_); }
  const WorkerGroupOptions& options() const { return options_; }

  // Starts watching: from now on losses restart the group and `events` hear of it.
  void Watch(WorkerGroupEvents events);
  // The executor saw the group fail (a closed connection, the watchdog, a failed step).
  void ReportLoss(const absl::Status& why);
  // Tells the group to stop (`stop` sends the kStop frame over the live channel, given by the
  // caller that owns it), kills what is left, and ends the watch.
  void Stop(const std::function<void()>& stop = nullptr);

 private:
  explicit WorkerGroupSupervisor(const WorkerGroupOptions& options) : options_(options) {}
  // Launches generation `generation_` and waits for its checked hello: the connection, or why not.
  absl::StatusOr<std::unique_ptr<TcpChannel>> Launch();
  // Refusal reason for a hello of this launch, or OK.
  absl::Status Check(const WorkerHello& hello) const;
  void Run();

  const WorkerGroupOptions options_;
  std::unique_ptr<TcpListener> listener_;
  std::string address_;  // what the workers connect to
  uint64_t session_ = 0;
  int generation_ = 0;
  std::unique_ptr<WorkerGroupLauncher> launcher_;
  WorkerHello first_hello_;
  WorkerHello last_hello_;
  std::unique_ptr<TcpChannel> first_channel_;
  WorkerGroupEvents events_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<absl::Status> loss_;  // reported and not yet handled
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace llm
