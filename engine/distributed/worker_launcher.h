// WorkerGroupLauncher: one launch of a worker group by the front end: the operator's launch
// prefix (e.g. "mpirun -np 4 --hostfile hosts -x NCCL_SOCKET_IFNAME=ib0", or nothing for one
// process) followed by `<this llm> worker ...`, run by /bin/sh in a session of its own.
//
// The session is what lets the front end end everything it started on this host at once: an MPI
// launcher puts each local rank in a process group of its own, but all stay in the launcher's
// session, so Kill signals every process of that session (a stopped rank included). Ranks on
// other hosts end with their launcher (its daemons lose it), and every rank 0 ends when its
// connection to the front end closes.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace llm {

// `argument` quoted for /bin/sh (single quotes; a quote inside becomes '\'').
std::string ShellQuote(const std::string& argument);

class WorkerGroupLauncher {
 public:
  // Starts `/bin/sh -c "exec <prefix> <quoted command...>"`. Variables of an MPI job the front end
  // itself may run in (OMPI_*, PMIX_*, PMI_*) are removed from the child's environment, or a
  // launcher inside it would join that job instead of starting its own.
  static absl::StatusOr<std::unique_ptr<WorkerGroupLauncher>> Start(const std::string& prefix,
                                                                    const std::vector<std::string>& command);
  ~WorkerGroupLauncher();  // Kill()
  WorkerGroupLauncher(const WorkerGroupLauncher&) = delete;
  WorkerGroupLauncher& operator=(const WorkerGroupLauncher&) = delete;

  // "exited with status 1" / "was killed by signal 9" once the launcher ended; nullopt while it
  // runs. Reaps it.
  std::optional<std::string> Exited();
  // SIGKILL to every process of the launch's session here, then reaps the launcher. Idempotent.
  void Kill();
  pid_t pid() const { return pid_; }
  const std::string& command_line() const { return command_line_; }

 private:
  WorkerGroupLauncher(pid_t pid, std::string command_line) : pid_(pid), command_line_(std::move(command_line)) {}
  const pid_t pid_;
  const std::string command_line_;
  std::optional<std::string> exit_;
};

}  // namespace llm
