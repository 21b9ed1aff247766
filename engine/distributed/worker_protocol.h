// The protocol between a front end (`llm serve --workers`) and world rank 0 of a worker group it
// launched (`llm worker --frontend ADDRESS`), as frames over a TcpChannel (parallel/tcp_channel.h).
// The front end's engine plans every step; the group runs them and returns the sampled tokens.
//
//   worker rank 0                       front end
//   (loads its share with its ranks)
//   connect, kHello ------------------> checks the session, the settings against the first
//                                       group's and the limits its engine was built with
//                   <------------------ kWelcome, or kRefuse with the reason (the worker exits 2)
//                   <------------------ kLaunch (a StepMessage, step_message.h)
//                   <------------------ kCollect
//   kResults -------------------------> one per kCollect, for the oldest launched step
//                   <------------------ kStop: the group stops its ranks and exits 0
//
// A step that fails in the group comes back as a kResults with the error, after which the group
// ends (its communicators abandoned the step, parallel/group_abort.h): the front end starts a new
// one and recomputes. The connection closing is how the front end learns that rank 0 died, and
// how a worker learns that its front end is gone (it then exits).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/distributed/engine_group.h"
#include "engine/distributed/settings_fingerprint.h"
#include "engine/runtime/step_executor.h"

namespace llm {

enum class WorkerFrame : uint32_t {
  kHello = 1,
  kWelcome = 2,
  kRefuse = 3,
  kLaunch = 4,
  kCollect = 5,
  kResults = 6,
  kStop = 7,
};

// What a worker group says about itself when it connects.
struct WorkerHello {
  uint64_t session = 0;     // the secret the front end gave this launch (--session): others are refused
  int32_t replica = 0;      // which of the front end's replicas
  int32_t generation = 0;   // which launch of that replica (a late group of an earlier one is refused)
  SettingsFingerprint settings;
  GroupLimits limits;       // info.config is not sent: the front end reads the model's config itself
  double load_seconds = 0;  // from the worker process's start to this hello (MPI start-up, model load)
};

std::string EncodeHello(const WorkerHello& hello);
absl::StatusOr<WorkerHello> DecodeHello(std::string_view bytes);  // DataLoss when malformed

// A collected step: the group's status, its device timing and the sampled tokens.
void EncodeStepResults(const absl::Status& status, const StepDeviceTiming& timing,
                       absl::Span<const SampleResult> results, std::string& out);
// Fills `results` and `timing`; returns the group's error when the step failed there, DataLoss
// when the bytes are malformed or hold another number of rows.
absl::Status DecodeStepResults(std::string_view bytes, absl::Span<SampleResult> results, StepDeviceTiming* timing);

}  // namespace llm
