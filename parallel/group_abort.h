// GroupAbort: how one rank tells every other rank of its MPI world that the group's current work
// is abandoned, so that nobody waits out a deadline for it.
//
// A rank that cannot take part in a step (it rejected the step, or its share failed) would leave
// its peers waiting in a collective it never enters: minutes, the communicators' deadline. Instead
// it raises an abort notice with its reason: a short message to every other rank on a
// communicator of its own. Every MpiCommunicator made from the same world watches for notices
// while it waits (MpiCommunicator::Await), so a peer waiting in a collective or for the next
// message gives up within about a millisecond, with the raiser's reason. An abort is final: the
// group's communicators refuse every later operation, and the processes are expected to end
// (a supervisor, mpirun or the front end starts a new group).
//
// Thread-safe: any thread may Raise or Check (MPI_THREAD_MULTIPLE; matched probes, so two threads
// never take the same notice).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace llm {

class GroupAbort {
 public:
  // Collective over MPI_COMM_WORLD (MPI must be initialized): duplicates it for the notices.
  // DeadlineExceeded when some rank does not join within `timeout`.
  static absl::StatusOr<std::shared_ptr<GroupAbort>> ForWorld(absl::Duration timeout);
  ~GroupAbort();
  GroupAbort(const GroupAbort&) = delete;
  GroupAbort& operator=(const GroupAbort&) = delete;

  // Sends `reason` to every other rank (once: later calls do nothing) and marks the group aborted
  // here too. Never blocks on the peers: a notice is a few hundred bytes (MPI's eager protocol),
  // and a dead peer is simply not told.
  void Raise(std::string_view reason);
  // The reason of the first notice raised here or received from a peer; nullopt while none has.
  // Cheap when nothing arrived (one matched probe), and once one has, a read of a flag.
  std::optional<std::string> Check();
  bool raised() const { return raised_.load(std::memory_order_acquire); }

 private:
  struct Mpi;  // the MPI_Comm and the notices' send requests (defined in the .cc)
  explicit GroupAbort(std::unique_ptr<Mpi> mpi, int rank, int size);

  std::unique_ptr<Mpi> mpi_;
  const int rank_;
  const int size_;
  std::atomic<bool> raised_{false};
  std::mutex mu_;       // the reason, the probe and the sends
  std::string reason_;  // valid once raised_
};

}  // namespace llm
