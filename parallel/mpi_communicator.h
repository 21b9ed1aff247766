// MpiCommunicator: the host-buffer Communicator (CPU backend, CI) and the control plane
// (bootstrap of NCCL, step plans shipped from the scheduling rank to all ranks).
//
// It owns its MPI communicator (a duplicate or split of MPI_COMM_WORLD, freed in the
// destructor). Every operation is non-blocking MPI polled until done or until the
// communicator's timeout has passed, which gives DeadlineExceeded naming the operation, the
// group and the peer(s) instead of a hang. Size-1 communicators never call MPI (AllGather is a
// copy, the rest no-ops), which is also how MpiMode::kSingleProcess works without MPI at all.
//
// A wait also ends early when another rank raises an abort notice (RaiseGroupAbort): Aborted,
// with that rank's reason, handled below as a missed deadline is.
//
// After a deadline:
//   * Send/Recv: the request is cancelled; if the cancel succeeds the communicator stays usable.
//   * Collectives (and a send/recv whose cancel failed) cannot be cancelled in MPI: the request
//     is parked inside the communicator, which is marked broken (every later call returns
//     FailedPrecondition). MPI may still write into the caller's buffer if the late peers arrive,
//     so callers must treat DeadlineExceeded as fatal for that communicator: keep the buffer or
//     end the process (the server aborts the job).
//
// Not thread-safe: one thread at a time per communicator. Different communicators may be used
// from different threads only when MpiRuntime::thread_multiple().
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/communicator.h"
#include "parallel/group_abort.h"
#include "parallel/mpi_runtime.h"
#include "parallel/topology.h"

namespace llm {

struct MpiCommOptions {
  // Deadline of each operation, measured from its start.
  absl::Duration timeout = absl::Seconds(300);
};

class MpiCommunicator final : public Communicator {
 public:
  // All ranks of the runtime (a duplicate of MPI_COMM_WORLD). Collective over the world.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> World(const MpiRuntime& runtime,
                                                                const MpiCommOptions& options = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  // Collective over this communicator: ranks passing the same `color` form one new communicator,
  // ordered by `key` (ties by current rank). `name` labels it in errors ("tp", "pp").
  // MPI_Comm_split itself cannot time out; a barrier with this communicator's deadline runs
  // first so that a missing rank gives DeadlineExceeded there.
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> Split(int color, int key, std::string name);

  // Communicator.
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // f32 and i32/i64 reduce natively; f16 and bf16 are widened to f32, summed, and rounded once.
  absl::Status AllReduceSum(void* data, size_t count, DType dtype) override;
  absl::Status AllGather(const void* send, void* recv, size_t count, DType dtype) override;
  absl::Status Broadcast(void* data, size_t count, DType dtype, int root) override;
  absl::Status Send(const void* data, size_t count, DType dtype, int peer) override;
  absl::Status Recv(void* data, size_t count, DType dtype, int peer) override;

  // Control plane. Broadcasts a byte string of any length from `root`: the root's *bytes is
  // sent, every other rank's *bytes is replaced (length first, then the payload).
  absl::Status BroadcastBytes(std::string* bytes, int root);
  // Point-to-point byte strings of any length (length first, then the payload). Messages between
  // two ranks on one communicator arrive in the order they were sent.
  absl::Status SendBytes(const std::string& bytes, int peer);
  absl::Status RecvBytes(std::string* bytes, int peer);
  absl::Status Barrier();

  const std::string& name() const { return name_; }
  // World ranks of the members, indexed by rank in this communicator.
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  absl::Duration timeout() const { return timeout_; }
  // Sets the deadline of every operation, receives included.
  void set_timeout(absl::Duration timeout) { timeout_ = receive_timeout_ = timeout; }
  // Receives alone: a worker waiting for its next step waits as long as the server is idle, while
  // a step sent to a peer that stopped taking them still fails at the deadline.
  absl::Duration receive_timeout() const { return receive_timeout_; }
  void set_receive_timeout(absl::Duration timeout) { receive_timeout_ = timeout; }
  // True after a collective missed its deadline (or was abandoned); every later call returns
  // FailedPrecondition.
  bool broken() const { return broken_; }

  // Abort notices (parallel/group_abort.h), shared by every communicator split from one World():
  // tells every rank that this one abandons the group's work. Each wait of every rank's
  // communicators gives up within about a millisecond with Aborted and the reason, and every
  // later call returns Aborted. No-op on single-process communicators.
  void RaiseGroupAbort(std::string_view reason);
  // The reason once a notice was raised here or received; nullopt before.
  std::optional<std::string> GroupAborted() const;
  // Whether a notice was raised here or taken by a wait (no MPI call: cheap enough per step).
  bool aborted() const { return abort_ != nullptr && abort_->raised(); }

 private:
  struct Mpi;  // the MPI_Comm and parked requests; defined in the .cc (keeps mpi.h out of here)

  MpiCommunicator(std::unique_ptr<Mpi> mpi, int rank, int size, std::string name,
                  std::vector<int> world_ranks, absl::Duration timeout);

  absl::Status CheckUsable(const char* op) const;
  absl::Status AllReduceWidened(void* data, size_t count, DType dtype);
  std::string Describe(const char* op, int peer) const;

  std::unique_ptr<Mpi> mpi_;  // null when size 1 without MPI (single-process mode)
  int rank_;
  int size_;
  std::string name_;
  std::vector<int> world_ranks_;
  absl::Duration timeout_;
  absl::Duration receive_timeout_;
  bool broken_ = false;
  std::shared_ptr<GroupAbort> abort_;  // null without MPI
  std::vector<float> widen_scratch_;  // f16/bf16 all-reduce in f32, reused between calls
};

// The communicators of one rank for a tp x pp topology. `tp` holds the ranks of one pipeline
// stage (group rank == tp_rank), `pp` those of one tp_rank across stages (group rank ==
// pp_stage). Collective over the whole world.
struct ParallelGroups {
  std::unique_ptr<MpiCommunicator> world;
  std::unique_ptr<MpiCommunicator> tp;
  std::unique_ptr<MpiCommunicator> pp;
};
absl::StatusOr<ParallelGroups> MakeParallelGroups(const MpiRuntime& runtime, const Topology& topology,
                                                  const MpiCommOptions& options = {});

}  // namespace llm
