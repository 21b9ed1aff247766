#include "parallel/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/core/status.h"
#include "parallel/internal/backoff.h"
#include "parallel/internal/mpi_error.h"

namespace llm {
namespace {

constexpr int kDataTag = 17;
// How long a cancelled request may take to report back before it is parked.
constexpr absl::Duration kCancelGrace = absl::Seconds(2);
// How long a send abandoned by an abort may take to finish a transfer its peer already matched.
constexpr absl::Duration kAbortedSendGrace = absl::Milliseconds(250);

// The MPI type that carries one element of `dtype` (f16/bf16 travel as 16-bit words).
MPI_Datatype MpiType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kF16:
      return MPI_UINT16_T;
    case DType::kBF16:
      return MPI_UINT16_T;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
    case DType::kF8E4M3:  // moved as bytes, never reduced
      return MPI_UINT8_T;
    case DType::kU4:  // never a tensor's dtype
      break;
  }
  return MPI_DATATYPE_NULL;
}

absl::Status CheckCount(size_t count, const char* op) {
  if (count > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": count ", count, " exceeds the MPI limit of ", INT_MAX, " elements"));
  }
  return absl::OkStatus();
}

std::vector<int> WorldRanksOf(MPI_Comm comm, int size) {
  std::vector<int> local(size), world(size, -1);
  for (int i = 0; i < size; ++i) local[i] = i;
  MPI_Group group, world_group;
  if (MPI_Comm_group(comm, &group) != MPI_SUCCESS) return world;
  if (MPI_Comm_group(MPI_COMM_WORLD, &world_group) == MPI_SUCCESS) {
    MPI_Group_translate_ranks(group, size, local.data(), world_group, world.data());
    MPI_Group_free(&world_group);
  }
  MPI_Group_free(&group);
  return world;
}

// How often a wait looks for abort notices: a millisecond is nothing against the deadlines, and
// a matched probe per poll would slow the microsecond-scale waits of a decode step.
constexpr absl::Duration kAbortCheckInterval = absl::Milliseconds(1);

// Waits for all `reqs` until `deadline`. OK when complete, DeadlineExceeded (no message) when
// the deadline passed first, Aborted (the reason) when `abort` has a notice, Internal on an MPI
// error.
absl::Status PollUntil(MPI_Request* reqs, int n, absl::Time deadline, GroupAbort* abort,
                       MPI_Status* statuses = MPI_STATUSES_IGNORE) {
  const absl::Time start = absl::Now();
  absl::Time next_abort_check = start + kAbortCheckInterval;
  for (int i = 0;; ++i) {
    int done = 0;
    const int rc = MPI_Testall(n, reqs, &done, statuses);
    if (rc != MPI_SUCCESS) return internal::MpiStatus(rc, "MPI_Testall", __FILE__, __LINE__);
    if (done) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) return absl::DeadlineExceededError("");
    if (abort != nullptr && now >= next_abort_check) {
      if (std::optional<std::string> reason = abort->Check()) return absl::AbortedError(*reason);
      next_abort_check = now + kAbortCheckInterval;
    }
    internal::Backoff(i, start);
  }
}

}  // namespace

struct MpiCommunicator::Mpi {
  MPI_Comm comm = MPI_COMM_NULL;
  // Requests that missed their deadline and could not be cancelled. MPI forbids freeing an
  // active collective request, so they stay here until the process ends.
  std::vector<MPI_Request> parked;

  ~Mpi() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || comm == MPI_COMM_NULL) return;
    if (!parked.empty()) {
      int done = 0;
      MPI_Testall(static_cast<int>(parked.size()), parked.data(), &done, MPI_STATUSES_IGNORE);
    }
    // Pending operations (parked ones) keep the communicator alive inside MPI until they end.
    MPI_Comm_free(&comm);
  }

  // Waits for `reqs` (all on `comm`) until the deadline or an abort notice. Then cancellable
  // requests (point-to-point) are cancelled; what cannot be cancelled is parked and `*broken`
  // set. Returns OK when the operation completed (also when it completed while being cancelled),
  // DeadlineExceeded or Aborted with `what` otherwise.
  absl::Status Await(MPI_Request* reqs, int n, absl::Duration timeout, bool cancellable,
                     const std::string& what, bool* broken, GroupAbort* abort, bool receive = false) {
    absl::Status s = PollUntil(reqs, n, absl::Now() + timeout, abort);
    if (!absl::IsDeadlineExceeded(s) && !absl::IsAborted(s)) return s;
    const std::string message =
        absl::IsAborted(s) ? absl::StrCat(what, " was abandoned: ", s.message())
                           : absl::StrCat(what, " did not complete within ", absl::FormatDuration(timeout));
    auto failure = [&](const std::string& text) {
      return absl::IsAborted(s) ? absl::AbortedError(text) : absl::DeadlineExceededError(text);
    };
    // After an abort nothing more runs on this group, but a peer may already have matched this
    // operation: MPI would then go on reading (a send) or writing (a receive) its buffer after the
    // caller freed it (seen: segfaults in MPI's progress of a later wait). A receive is cancelled
    // (that works unless it matched; then it completes within the grace). A send cannot be
    // cancelled (OpenMPI's ob1 ignores it): it gets a short grace to finish, which it does if the
    // peer matched it, else the peer cancelled its receive and never asks for the data.
    if (absl::IsAborted(s) && cancellable && !receive) {
      if (PollUntil(reqs, n, absl::Now() + kAbortedSendGrace, nullptr).ok())
        return failure(absl::StrCat(message, " (the send completed)"));
    } else if (cancellable) {
      for (int i = 0; i < n; ++i) {
        if (reqs[i] != MPI_REQUEST_NULL) MPI_Cancel(&reqs[i]);
      }
      std::vector<MPI_Status> statuses(n);
      if (PollUntil(reqs, n, absl::Now() + kCancelGrace, nullptr, statuses.data()).ok()) {
        bool any_cancelled = false;
        for (MPI_Status& st : statuses) {
          int flag = 0;
          MPI_Test_cancelled(&st, &flag);
          any_cancelled |= flag != 0;
        }
        if (!any_cancelled) return absl::OkStatus();  // it completed after all
        return failure(absl::StrCat(message, " (request cancelled)"));
      }
    }
    for (int i = 0; i < n; ++i) {
      if (reqs[i] != MPI_REQUEST_NULL) parked.push_back(reqs[i]);
    }
    *broken = true;
    return failure(absl::StrCat(message, " (request left pending; communicator is now broken)"));
  }
};

MpiCommunicator::MpiCommunicator(std::unique_ptr<Mpi> mpi, int rank, int size, std::string name,
                                 std::vector<int> world_ranks, absl::Duration timeout)
    : mpi_(std::move(mpi)),
      rank_(rank),
      size_(size),
      name_(std::move(name)),
      world_ranks_(std::move(world_ranks)),
      timeout_(timeout),
      receive_timeout_(timeout) {}

MpiCommunicator::~MpiCommunicator() {
  if (mpi_ != nullptr && !mpi_->parked.empty()) {
    // A parked all-reduce may still write into the scratch buffer: let it leak.
    new std::vector<float>(std::move(widen_scratch_));
  }
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::World(const MpiRuntime& runtime,
                                                                        const MpiCommOptions& options) {
  if (!runtime.uses_mpi()) {
    return std::unique_ptr<MpiCommunicator>(
        new MpiCommunicator(nullptr, 0, 1, "world", {0}, options.timeout));
  }
  auto mpi = std::make_unique<Mpi>();
  MPI_Request req = MPI_REQUEST_NULL;
  LLM_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &mpi->comm, &req));
  bool broken = false;
  absl::Status s = mpi->Await(&req, 1, options.timeout, /*cancellable=*/false, "MPI_Comm_idup of MPI_COMM_WORLD",
                              &broken, nullptr);
  if (!s.ok()) {
    // The parked idup may still write the new handle into *mpi later: leak it on purpose.
    (void)mpi.release();
    return s;
  }
  LLM_MPI_CHECK(MPI_Comm_set_errhandler(mpi->comm, MPI_ERRORS_RETURN));
  int rank = 0, size = 1;
  LLM_MPI_CHECK(MPI_Comm_rank(mpi->comm, &rank));
  LLM_MPI_CHECK(MPI_Comm_size(mpi->comm, &size));
  ASSIGN_OR_RETURN(std::shared_ptr<GroupAbort> abort, GroupAbort::ForWorld(options.timeout));
  std::vector<int> world_ranks = WorldRanksOf(mpi->comm, size);
  auto world = std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(std::move(mpi), rank, size, "world", std::move(world_ranks), options.timeout));
  world->abort_ = std::move(abort);
  return world;
}

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Split(int color, int key,
                                                                        std::string name) {
  RETURN_IF_ERROR(CheckUsable("Split"));
  if (color < 0) return absl::InvalidArgumentError(absl::StrCat("Split: negative color ", color));
  if (mpi_ == nullptr) {
    return std::unique_ptr<MpiCommunicator>(
        new MpiCommunicator(nullptr, 0, 1, std::move(name), world_ranks_, timeout_));
  }
  // MPI_Comm_split blocks without a deadline; a barrier first turns a missing rank into
  // DeadlineExceeded instead of a hang.
  RETURN_IF_ERROR(Barrier());
  auto mpi = std::make_unique<Mpi>();
  LLM_MPI_CHECK(MPI_Comm_split(mpi_->comm, color, key, &mpi->comm));
  LLM_MPI_CHECK(MPI_Comm_set_errhandler(mpi->comm, MPI_ERRORS_RETURN));
  int rank = 0, size = 1;
  LLM_MPI_CHECK(MPI_Comm_rank(mpi->comm, &rank));
  LLM_MPI_CHECK(MPI_Comm_size(mpi->comm, &size));
  std::vector<int> world_ranks = WorldRanksOf(mpi->comm, size);
  auto split = std::unique_ptr<MpiCommunicator>(
      new MpiCommunicator(std::move(mpi), rank, size, std::move(name), std::move(world_ranks), timeout_));
  split->abort_ = abort_;  // one world, one abort: a notice reaches every communicator of it
  return split;
}

absl::Status MpiCommunicator::CheckUsable(const char* op) const {
  if (abort_ != nullptr && abort_->raised())
    return absl::AbortedError(absl::StrCat(op, " on ", name_, " communicator: ", *abort_->Check()));
  if (broken_) {
    return absl::FailedPreconditionError(
        absl::StrCat(op, " on ", name_, " communicator: broken by an earlier missed deadline"));
  }
  return absl::OkStatus();
}

void MpiCommunicator::RaiseGroupAbort(std::string_view reason) {
  if (abort_ != nullptr) abort_->Raise(reason);
}

std::optional<std::string> MpiCommunicator::GroupAborted() const {
  return abort_ != nullptr ? abort_->Check() : std::nullopt;
}

std::string MpiCommunicator::Describe(const char* op, int peer) const {
  std::string s = absl::StrCat("MPI ", op, " on ", name_, " communicator (rank ", rank_, "/", size_,
                               ", world rank ", world_ranks_[rank_], ")");
  if (peer >= 0) {
    absl::StrAppend(&s, " with peer rank ", peer, " (world rank ", world_ranks_[peer], ")");
  } else {
    absl::StrAppend(&s, " with world ranks [", absl::StrJoin(world_ranks_, ","), "]");
  }
  return s;
}

absl::Status MpiCommunicator::AllReduceSum(void* data, size_t count, DType dtype) {
  RETURN_IF_ERROR(CheckUsable("AllReduceSum"));
  RETURN_IF_ERROR(CheckCount(count, "AllReduceSum"));
  if (dtype == DType::kU8) {
    return absl::InvalidArgumentError("AllReduceSum: uint8 is not a summable dtype");
  }
  if (size_ == 1 || count == 0) return absl::OkStatus();
  if (dtype == DType::kF16 || dtype == DType::kBF16) return AllReduceWidened(data, count, dtype);
  MPI_Request req = MPI_REQUEST_NULL;
  LLM_MPI_CHECK(
      MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MpiType(dtype), MPI_SUM, mpi_->comm, &req));
  return mpi_->Await(&req, 1, timeout_, false, Describe("AllReduceSum", -1), &broken_, abort_.get());
}

absl::Status MpiCommunicator::AllReduceWidened(void* data, size_t count, DType dtype) {
  // Summing 16-bit floats pairwise would round after every addition (and MPI has no such op):
  // widen to f32, reduce, round once. Every rank gets the same bits.
  widen_scratch_.resize(count);
  ConvertToFloat(dtype, data, widen_scratch_.data(), count);
  MPI_Request req = MPI_REQUEST_NULL;
  LLM_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, widen_scratch_.data(), static_cast<int>(count), MPI_FLOAT,
                               MPI_SUM, mpi_->comm, &req));
  RETURN_IF_ERROR(mpi_->Await(&req, 1, timeout_, false, Describe("AllReduceSum", -1), &broken_, abort_.get()));
  ConvertFromFloat(widen_scratch_.data(), dtype, data, count);
  return absl::OkStatus();
}

absl::Status MpiCommunicator::AllGather(const void* send, void* recv, size_t count, DType dtype) {
  RETURN_IF_ERROR(CheckUsable("AllGather"));
  RETURN_IF_ERROR(CheckCount(count, "AllGather"));
  if (count == 0) return absl::OkStatus();
  const size_t bytes = count * DTypeSize(dtype);
  char* my_slot = static_cast<char*>(recv) + rank_ * bytes;
  if (size_ == 1) {
    if (send != my_slot) std::memmove(my_slot, send, bytes);
    return absl::OkStatus();
  }
  const void* send_arg = send == my_slot ? MPI_IN_PLACE : send;
  MPI_Request req = MPI_REQUEST_NULL;
  LLM_MPI_CHECK(MPI_Iallgather(send_arg, static_cast<int>(count), MpiType(dtype), recv,
                               static_cast<int>(count), MpiType(dtype), mpi_->comm, &req));
  return mpi_->Await(&req, 1, timeout_, false, Describe("AllGather", -1), &broken_, abort_.get());
}

absl::Status MpiCommunicator::Broadcast(void* data, size_t count, DType dtype, int root) {
  RETURN_IF_ERROR(CheckUsable("Broadcast"));
  RETURN_IF_ERROR(CheckCount(count, "Broadcast"));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("Broadcast: root ", root, " out of range [0, ", size_, ")"));
  }
  if (size_ == 1 || count == 0) return absl::OkStatus();
  MPI_Request req = MPI_REQUEST_NULL;
  LLM_MPI_CHECK(MPI_Ibcast(data, static_cast<int>(count), MpiType(dtype), root, mpi_->comm, &req));
  return mpi_->Await(&req, 1, timeout_, false, Describe("Broadcast", root), &broken_, abort_.get());
}

absl::Status MpiCommunicator::Send(const void* data, size_t count, DType dtype, int peer) {
  RETURN_IF_ERROR(CheckUsable("Send"));
  RETURN_IF_ERROR(CheckCount(count, "Send"));
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("Send: peer ", peer, " must be another rank in [0, ",
                                                   size_, ") (this rank is ", rank_, ")"));
  }
  MPI_Request req = MPI_REQUEST_NULL;
  LLM_MPI_CHECK(MPI_Isend(data, static_cast<int>(count), MpiType(dtype), peer, kDataTag, mpi_->comm, &req));
  return mpi_->Await(&req, 1, timeout_, true, Describe("Send", peer), &broken_, abort_.get());
}

absl::Status MpiCommunicator::Recv(void* data, size_t count, DType dtype, int peer) {
  RETURN_IF_ERROR(CheckUsable("Recv"));
  RETURN_IF_ERROR(CheckCount(count, "Recv"));
  if (peer < 0 || peer >= size_ || peer == rank_) {
    return absl::InvalidArgumentError(absl::StrCat("Recv: peer ", peer, " must be another rank in [0, ",
                                                   size_, ") (this rank is ", rank_, ")"));
  }
  MPI_Request req = MPI_REQUEST_NULL;
  LLM_MPI_CHECK(MPI_Irecv(data, static_cast<int>(count), MpiType(dtype), peer, kDataTag, mpi_->comm, &req));
  return mpi_->Await(&req, 1, receive_timeout_, true, Describe("Recv", peer), &broken_, abort_.get(),
                     /*receive=*/true);
}

absl::Status MpiCommunicator::SendBytes(const std::string& bytes, int peer) {
  const uint64_t length = bytes.size();
  RETURN_IF_ERROR(Send(&length, 1, DType::kI64, peer));
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t offset = 0; offset < length; offset += kChunk)
    RETURN_IF_ERROR(Send(bytes.data() + offset, std::min<size_t>(kChunk, length - offset), DType::kU8, peer));
  return absl::OkStatus();
}

absl::Status MpiCommunicator::RecvBytes(std::string* bytes, int peer) {
  uint64_t length = 0;
  RETURN_IF_ERROR(Recv(&length, 1, DType::kI64, peer));
  bytes->resize(length);
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t offset = 0; offset < length; offset += kChunk)
    RETURN_IF_ERROR(Recv(bytes->data() + offset, std::min<size_t>(kChunk, length - offset), DType::kU8, peer));
  return absl::OkStatus();
}

absl::Status MpiCommunicator::BroadcastBytes(std::string* bytes, int root) {
  RETURN_IF_ERROR(CheckUsable("BroadcastBytes"));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("BroadcastBytes: root ", root, " out of range [0, ", size_, ")"));
  }
  if (size_ == 1) return absl::OkStatus();
  uint64_t length = rank_ == root ? bytes->size() : 0;
  RETURN_IF_ERROR(Broadcast(&length, 1, DType::kI64, root));
  if (rank_ != root) bytes->resize(length);
  // MPI counts are int: ship the payload in chunks of at most 1 GiB.
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t offset = 0; offset < length; offset += kChunk) {
    const size_t n = std::min<size_t>(kChunk, length - offset);
    RETURN_IF_ERROR(Broadcast(bytes->data() + offset, n, DType::kU8, root));
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Barrier() {
  RETURN_IF_ERROR(CheckUsable("Barrier"));
  if (size_ == 1) return absl::OkStatus();
  MPI_Request req = MPI_REQUEST_NULL;
  LLM_MPI_CHECK(MPI_Ibarrier(mpi_->comm, &req));
  return mpi_->Await(&req, 1, timeout_, false, Describe("Barrier", -1), &broken_, abort_.get());
}

absl::StatusOr<ParallelGroups> MakeParallelGroups(const MpiRuntime& runtime, const Topology& topology,
                                                  const MpiCommOptions& options) {
  if (topology.world_size() != runtime.world_size() || topology.rank() != runtime.world_rank()) {
    return absl::InvalidArgumentError(absl::StrCat("topology (", topology.ToString(),
                                                   ") does not match the MPI world (rank ",
                                                   runtime.world_rank(), " of ", runtime.world_size(), ")"));
  }
  ParallelGroups groups;
  ASSIGN_OR_RETURN(groups.world, MpiCommunicator::World(runtime, options));
  ASSIGN_OR_RETURN(groups.tp, groups.world->Split(topology.tp_group_color(), topology.tp_rank(), "tp"));
  ASSIGN_OR_RETURN(groups.pp, groups.world->Split(topology.pp_group_color(), topology.pp_stage(), "pp"));
  return groups;
}

}  // namespace llm
