#include "parallel/group_abort.h"

#include <mpi.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "parallel/internal/backoff.h"
#include "parallel/internal/mpi_error.h"

namespace llm {
namespace {

constexpr int kNoticeTag = 71;
// A notice stays small enough for every MPI's eager protocol: Raise never waits for a receiver.
constexpr size_t kMaxReasonBytes = 1024;

}  // namespace

struct GroupAbort::Mpi {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> sends;
  std::string sent;  // the buffer the sends read from; kept until they complete

  ~Mpi() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || comm == MPI_COMM_NULL) return;
    // Sends to peers that never took their notice (or are gone) finish in the background.
    for (MPI_Request& r : sends)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    MPI_Comm_free(&comm);
  }
};

absl::StatusOr<std::shared_ptr<GroupAbort>> GroupAbort::ForWorld(absl::Duration timeout) {
  auto mpi = std::make_unique<Mpi>();
  MPI_Request req = MPI_REQUEST_NULL;
  LLM_MPI_CHECK(MPI_Comm_idup(MPI_COMM_WORLD, &mpi->comm, &req));
  const absl::Time start = absl::Now(), deadline = start + timeout;
  for (int i = 0;; ++i) {
    int done = 0;
    LLM_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) break;
    if (absl::Now() >= deadline) {
      (void)mpi.release();  // the pending idup may still write the handle: leak it on purpose
      return absl::DeadlineExceededError(
          absl::StrCat("MPI_Comm_idup for abort notices did not complete within ", absl::FormatDuration(timeout)));
    }
    internal::Backoff(i, start);
  }
  LLM_MPI_CHECK(MPI_Comm_set_errhandler(mpi->comm, MPI_ERRORS_RETURN));
  int rank = 0, size = 1;
  LLM_MPI_CHECK(MPI_Comm_rank(mpi->comm, &rank));
  LLM_MPI_CHECK(MPI_Comm_size(mpi->comm, &size));
  return std::shared_ptr<GroupAbort>(new GroupAbort(std::move(mpi), rank, size));
}

GroupAbort::GroupAbort(std::unique_ptr<Mpi> mpi, int rank, int size)
    : mpi_(std::move(mpi)), rank_(rank), size_(size) {}

GroupAbort::~GroupAbort() = default;

void GroupAbort::Raise(std::string_view reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (raised_.load(std::memory_order_relaxed)) return;
  reason_ = std::string(reason.substr(0, kMaxReasonBytes));
  raised_.store(true, std::memory_order_release);
  mpi_->sent = reason_;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request r = MPI_REQUEST_NULL;
    // Errors (a peer already gone) are ignored: the others must still be told.
    if (MPI_Isend(mpi_->sent.data(), static_cast<int>(mpi_->sent.size()), MPI_CHAR, peer, kNoticeTag, mpi_->comm,
                  &r) == MPI_SUCCESS)
      mpi_->sends.push_back(r);
  }
}

std::optional<std::string> GroupAbort::Check() {
  if (raised_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (raised_.load(std::memory_order_relaxed)) return reason_;
  int found = 0;
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  if (MPI_Improbe(MPI_ANY_SOURCE, kNoticeTag, mpi_->comm, &found, &message, &status) != MPI_SUCCESS || !found)
    return std::nullopt;
  int bytes = 0;
  MPI_Get_count(&status, MPI_CHAR, &bytes);
  std::string text(static_cast<size_t>(std::max(bytes, 0)), '\0');
  if (MPI_Mrecv(text.data(), bytes, MPI_CHAR, &message, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    text = "(unreadable notice)";
  reason_ = absl::StrCat("rank ", status.MPI_SOURCE, " abandoned the group's work: ", text);
  raised_.store(true, std::memory_order_release);
  return reason_;
}

}  // namespace llm
