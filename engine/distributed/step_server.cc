#include "engine/distributed/step_server.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/distributed/step_message.h"

namespace llm {

absl::StatusOr<std::unique_ptr<StepServer>> StepServer::Connect(const std::string& address, const WorkerHello& hello,
                                                                absl::Duration timeout) {
  ASSIGN_OR_RETURN(std::unique_ptr<TcpChannel> channel, TcpChannel::Connect(address, timeout));
  RETURN_IF_ERROR(channel->Send(static_cast<uint32_t>(WorkerFrame::kHello), EncodeHello(hello), timeout));
  uint32_t kind = 0;
  std::string answer;
  RETURN_IF_ERROR(channel->Receive(&kind, &answer, timeout));
  if (kind == static_cast<uint32_t>(WorkerFrame::kRefuse))
    return absl::FailedPreconditionError(absl::StrCat("the front end refused this worker group: ", answer));
  if (kind != static_cast<uint32_t>(WorkerFrame::kWelcome))
    return absl::DataLossError(absl::StrCat("unexpected frame ", kind, " from the front end instead of a welcome"));
  return std::unique_ptr<StepServer>(new StepServer(std::move(channel)));
}

absl::Status StepServer::Serve(StepExecutor& executor) {
  std::deque<size_t> launched_rows;  // sample rows of each launched step not yet collected
  absl::Status failed;               // a launch that failed: the next collect reports it
  StepMessage message;
  std::string payload, out;
  std::vector<SampleResult> results;
  for (;;) {
    uint32_t kind = 0;
    // No deadline: an idle front end is not a failure, and a dead one closes the connection.
    RETURN_IF_ERROR(channel_->Receive(&kind, &payload));
    switch (static_cast<WorkerFrame>(kind)) {
      case WorkerFrame::kLaunch: {
        if (!failed.ok()) break;  // the group is over; the next collect says so
        if (absl::Status s = DecodeStepMessage(payload, message); !s.ok()) {
          failed = s;
          break;
        }
        launched_rows.push_back(message.rows.size());
        failed = executor.Launch(message.plan, message.rows);
        break;
      }
      case WorkerFrame::kCollect: {
        if (failed.ok() && launched_rows.empty())
          failed = absl::FailedPreconditionError("the front end collected a step it never launched");
        absl::Status status = failed;
        StepDeviceTiming timing;
        if (status.ok()) {
          results.resize(launched_rows.front());
          launched_rows.pop_front();
          status = executor.Collect(absl::MakeSpan(results), &timing);
        }
        EncodeStepResults(status, timing, results, out);
        RETURN_IF_ERROR(channel_->Send(static_cast<uint32_t>(WorkerFrame::kResults), out));
        if (!status.ok()) return status;
        break;
      }
      case WorkerFrame::kStop:
        return absl::OkStatus();
      default:
        return absl::DataLossError(absl::StrCat("unexpected frame ", kind, " from the front end"));
    }
  }
}

}  // namespace llm
