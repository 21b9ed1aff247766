// llm worker: one rank of a worker group that a front end (`llm serve --workers PREFIX`) launched
// as `PREFIX <llm> worker --frontend ADDRESS --session S --replica R --generation G <model flags>`.
// Every rank loads its share, the ranks compare their settings, then world rank 0 connects back
// to the front end and runs the steps its engine launches over the whole group (StepServer);
// the other ranks run their stage's share as under `mpirun llm serve`. Not meant to be run by
// hand.
//
// Exit status: 0 when the front end stops the group, 2 when it refuses it or the ranks' settings
// differ, 1 when a step fails or the front end goes away (the group is then over; the front end
// starts a new one).
#include <cstdio>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/distributed/settings_fingerprint.h"
#include "engine/distributed/step_server.h"
#include "server/cli/commands.h"
#include "server/cli/model_flags.h"

namespace llm::cli {
namespace {

int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "llm worker: %s\n", std::string(status.message()).c_str());
  return code;
}

}  // namespace

int RunWorker(int argc, char** argv) {
  const absl::Time started = absl::Now();
  FlagSet flags("worker",
                "One rank of a worker group serving a front end's engine. Started by 'llm serve --workers PREFIX' as\n"
                "'PREFIX llm worker --frontend ADDRESS ...' (under mpirun for TP x PP groups); not for direct use.");
  ModelFlags model;
  model.Register(flags);
  std::string frontend, session;
  int64_t replica = 0, generation = 0, connect_timeout_s = 60;
  flags.String("frontend", &frontend, "HOST:PORT of the front end that launched this group");
  flags.String("session", &session, "the front end's secret for this launch");
  flags.Int("replica", &replica, "which of the front end's replicas this group is");
  flags.Int("generation", &generation, "which launch of that replica");
  flags.Int("connect-timeout-s", &connect_timeout_s, "seconds rank 0 keeps trying to reach the front end");
  if (auto exit_code = HandleParse(flags, argc, argv)) return *exit_code;
  if (absl::Status s = model.Validate(); !s.ok()) return Fail(s, 2);
  uint64_t session_id = 0;
  if (frontend.empty() || !absl::SimpleAtoi(session, &session_id))
    return Fail(absl::InvalidArgumentError("--frontend and --session are required (llm serve --workers sets them)"), 2);

  absl::StatusOr<ParallelOptions> parallel = model.ToParallelOptions();
  if (!parallel.ok()) return Fail(parallel.status(), 2);
  const EngineBuildOptions build = model.ToBuildOptions();
  auto deployment = Deployment::Create(build, *parallel, &argc, &argv, GroupRole::kServeFrontEnd);
  if (!deployment.ok()) return Fail(deployment.status(), IsUsageError(deployment.status()) ? 2 : 1);
  if ((*deployment)->rank() != 0) {
    // Until rank 0 stops the group (0), or a step fails anywhere (1: the group is over).
    const absl::Status s = (*deployment)->RunWorker();
    return s.ok() ? 0 : Fail(s, 1);
  }
  std::unique_ptr<StepExecutor> executor = (*deployment)->group().TakeExecutor();
  WorkerHello hello;
  hello.session = session_id;
  hello.replica = static_cast<int32_t>(replica);
  hello.generation = static_cast<int32_t>(generation);
  absl::StatusOr<SettingsFingerprint> settings = ComputeSettingsFingerprint(build, *parallel);
  if (!settings.ok()) return Fail(settings.status(), 1);
  hello.settings = *std::move(settings);
  hello.limits = (*deployment)->group().limits();
  hello.load_seconds = absl::ToDoubleSeconds(absl::Now() - started);
  auto server = StepServer::Connect(frontend, hello, absl::Seconds(connect_timeout_s));
  if (!server.ok()) return Fail(server.status(), absl::IsFailedPrecondition(server.status()) ? 2 : 1);
  const absl::Status served = (*server)->Serve(*executor);
  executor.reset();  // tells the other ranks to stop, where they still listen
  return served.ok() ? 0 : Fail(served, 1);
}

}  // namespace llm::cli
