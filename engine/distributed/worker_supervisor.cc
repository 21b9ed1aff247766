#include "engine/distributed/worker_supervisor.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"

namespace llm {
namespace {

// How often the watch looks at the launcher while nothing is reported.
constexpr absl::Duration kWatchPoll = absl::Milliseconds(100);
// How long a connection may take to say hello once it is accepted.
constexpr absl::Duration kHelloTimeout = absl::Seconds(10);
// How long a group told to stop may take before it is killed.
constexpr absl::Duration kStopGrace = absl::Seconds(5);

// The entries that may differ between launches: a restart pins the KV cache to the first group's.
SettingsFingerprint WithoutPinned(SettingsFingerprint f) {
  std::erase_if(f, [](const Setting& s) { return s.name == "--kv-cache-blocks"; });
  return f;
}

std::string DescribeLimits(const GroupLimits& l) {
  const EngineInfo& i = l.info;
  return absl::StrCat("context ", i.max_context, ", ", i.max_tokens_per_step, " tokens and ", i.max_seqs,
                      " sequences a step, ", i.kv_blocks, " KV blocks of ", i.kv_block_size, ", block table ",
                      l.block_table_width, ", ", l.max_in_flight, " steps in flight",
                      l.chains_steps ? ", chained" : "");
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerGroupSupervisor>> WorkerGroupSupervisor::Start(const WorkerGroupOptions& options) {
  std::unique_ptr<WorkerGroupSupervisor> s(new WorkerGroupSupervisor(options));
  ASSIGN_OR_RETURN(s->listener_, TcpListener::Listen(options.listen_host, options.listen_port));
  std::string host = options.advertise_host.empty() ? options.listen_host : options.advertise_host;
  if (host == "0.0.0.0" || host == "::") host = HostName();
  s->address_ = host.find(':') != std::string::npos ? absl::StrCat("[", host, "]:", s->listener_->port())
                                                    : absl::StrCat(host, ":", s->listener_->port());
  s->session_ = std::random_device{}() * uint64_t{0x9E3779B97F4A7C15} ^ std::random_device{}();
  absl::StatusOr<std::unique_ptr<TcpChannel>> channel = s->Launch();
  if (!channel.ok()) {
    if (s->launcher_) s->launcher_->Kill();
    return absl::Status(channel.status().code(),
                        absl::StrCat("replica ", options.replica, ": ", channel.status().message()));
  }
  s->first_channel_ = *std::move(channel);
  return s;
}

WorkerGroupSupervisor::~WorkerGroupSupervisor() { Stop(); }

absl::Status WorkerGroupSupervisor::Check(const WorkerHello& hello) const {
  if (generation_ == 0) {
    // The front end's own view of the model (its config) must be what the group loaded.
    for (const Setting& expected : options_.expected_settings) {
      auto it = std::find_if(hello.settings.begin(), hello.settings.end(),
                             [&](const Setting& s) { return s.name == expected.name; });
      if (it == hello.settings.end() || it->value != expected.value)
        return absl::FailedPreconditionError(
            absl::StrCat(expected.name, " is '", expected.value, "' at the front end but '",
                         it == hello.settings.end() ? std::string("absent") : it->value, "' in the worker group"));
    }
    return absl::OkStatus();
  }
  if (auto differs = FirstDifference(WithoutPinned(first_hello_.settings), "the first worker group",
                                     WithoutPinned(hello.settings), "the restarted one"))
    return absl::FailedPreconditionError(*differs);
  const std::string first = DescribeLimits(first_hello_.limits), now = DescribeLimits(hello.limits);
  if (first != now)
    return absl::FailedPreconditionError(
        absl::StrCat("the restarted worker group has other limits (", now, ") than the first (", first, ")"));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TcpChannel>> WorkerGroupSupervisor::Launch() {
  std::vector<std::string> command = options_.worker_command;
  command.insert(command.end(), {"--frontend", address_, "--session", std::to_string(session_), "--replica", std::to_string(options_.replica),
                                 "--generation", std::to_string(generation_)});
  if (generation_ > 0) {  // the engine's pool was sized by the first group
    command.push_back("--kv-cache-blocks");
    command.push_back(std::to_string(first_hello_.limits.info.kv_blocks));
  }
  ASSIGN_OR_RETURN(launcher_, WorkerGroupLauncher::Start(options_.launch_prefix, command));
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return absl::CancelledError("the front end is stopping");
    }
    if (std::optional<std::string> exit = launcher_->Exited())
      return absl::UnavailableError(
          absl::StrCat("the worker group ", *exit, " before it connected (", launcher_->command_line(), ")"));
    if (absl::Now() >= deadline)
      return absl::DeadlineExceededError(absl::StrCat("the worker group did not connect within ",
                                                      absl::FormatDuration(options_.start_timeout)));
    absl::StatusOr<std::unique_ptr<TcpChannel>> channel = listener_->Accept(absl::Milliseconds(200));
    if (absl::IsDeadlineExceeded(channel.status())) continue;
    if (absl::IsCancelled(channel.status())) return absl::CancelledError("the front end is stopping");
    if (!channel.ok()) return channel.status();
    uint32_t kind = 0;
    std::string bytes;
    if (!(*channel)->Receive(&kind, &bytes, kHelloTimeout, 1 << 20).ok() ||
        kind != static_cast<uint32_t>(WorkerFrame::kHello))
      continue;  // not a worker of ours: a stray connection
    absl::StatusOr<WorkerHello> hello = DecodeHello(bytes);
    if (!hello.ok() || hello->session != session_ || hello->replica != options_.replica ||
        hello->generation != generation_) {
      const std::string why = hello.ok() ? "not a worker group of this launch" : std::string(hello.status().message());
      (void)(*channel)->Send(static_cast<uint32_t>(WorkerFrame::kRefuse), why, kHelloTimeout);
      if (!hello.ok() && absl::IsFailedPrecondition(hello.status())) return hello.status();  // another build
      continue;
    }
    if (absl::Status check = Check(*hello); !check.ok()) {
      (void)(*channel)->Send(static_cast<uint32_t>(WorkerFrame::kRefuse), std::string(check.message()), kHelloTimeout);
      return check;
    }
    RETURN_IF_ERROR((*channel)->Send(static_cast<uint32_t>(WorkerFrame::kWelcome), "", kHelloTimeout));
    if (generation_ == 0) first_hello_ = *hello;
    last_hello_ = *std::move(hello);
    return channel;
  }
}

void WorkerGroupSupervisor::Watch(WorkerGroupEvents events) {
  events_ = std::move(events);
  thread_ = std::thread([this] { Run(); });
}

void WorkerGroupSupervisor::ReportLoss(const absl::Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!loss_) loss_ = why;
  cv_.notify_all();
}

void WorkerGroupSupervisor::Stop(const std::function<void()>& stop) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (listener_) listener_->Interrupt();
  if (thread_.joinable()) thread_.join();
  if (!launcher_) return;
  if (stop) {
    stop();  // the group stops its ranks and exits 0
    const absl::Time give_up = absl::Now() + kStopGrace;
    while (!launcher_->Exited() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
  }
  launcher_->Kill();
  launcher_.reset();
}

void WorkerGroupSupervisor::Run() {
  const int replica = options_.replica;
  int failures_in_row = 0;
  absl::Time attached_at = absl::Now();
  for (;;) {
    absl::Status loss;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, absl::ToChronoNanoseconds(kWatchPoll), [&] { return stop_ || loss_.has_value(); });
      if (stop_) return;
      if (loss_) {
        loss = *loss_;
        loss_.reset();
      }
    }
    if (loss.ok()) {
      // Nothing reported: the launcher ending (a rank died, the job was torn down) is a loss too,
      // seen here even while no step is in flight.
      std::optional<std::string> exit = launcher_->Exited();
      if (!exit) continue;
      loss = absl::UnavailableError(absl::StrCat("the worker group ", *exit));
      events_.detach(loss);
    }
    const absl::Time lost_at = absl::Now();
    if (lost_at - attached_at >= options_.stable_after) failures_in_row = 0;
    std::fprintf(stderr, "workers: replica %d: worker group lost: %s\n", replica, std::string(loss.message()).c_str());
    launcher_->Kill();
    for (;;) {
      ++failures_in_row;
      if (failures_in_row > options_.max_restarts) {
        const absl::Status gone = absl::UnavailableError(
            absl::StrCat("the worker group of replica ", replica, " failed ", failures_in_row - 1,
                         " restarts in a row; giving up (last: ", loss.message(), ")"));
        std::fprintf(stderr, "workers: replica %d: %s\n", replica, std::string(gone.message()).c_str());
        events_.gone(gone);
        return;
      }
      if (failures_in_row > 1) {
        const absl::Duration delay =
            std::min(options_.max_backoff, options_.backoff * static_cast<double>(int64_t{1} << std::min(failures_in_row - 2, 20)));
        std::fprintf(stderr, "workers: replica %d: restart %d in a row, waiting %s first\n", replica, failures_in_row,
                     absl::FormatDuration(delay).c_str());
        std::unique_lock<std::mutex> lock(mu_);
        if (cv_.wait_for(lock, absl::ToChronoNanoseconds(delay), [&] { return stop_; })) return;
      }
      ++generation_;
      const absl::Time launched = absl::Now();
      absl::StatusOr<std::unique_ptr<TcpChannel>> channel = Launch();
      if (channel.ok()) {
        attached_at = absl::Now();
        std::fprintf(stderr,
                     "workers: replica %d: worker group %d serves, %.3f s after the loss (launch to hello %.3f s, "
                     "of which the workers took %.3f s to start and load)\n",
                     replica, generation_, absl::ToDoubleSeconds(attached_at - lost_at),
                     absl::ToDoubleSeconds(attached_at - launched), last_hello_.load_seconds);
        events_.attach(*std::move(channel));
        break;
      }
      if (absl::IsCancelled(channel.status())) return;
      loss = channel.status();
      std::fprintf(stderr, "workers: replica %d: restart failed: %s\n", replica, std::string(loss.message()).c_str());
      launcher_->Kill();
    }
  }
}

}  // namespace llm
