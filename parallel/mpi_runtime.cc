#include "parallel/mpi_runtime.h"

#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "parallel/internal/backoff.h"
#include "parallel/internal/mpi_error.h"

namespace llm {
namespace {

std::atomic<bool> g_runtime_alive{false};

// Releases the one-runtime slot when Create fails half-way.
class AliveSlot {
 public:
  ~AliveSlot() {
    if (!committed_) g_runtime_alive.store(false);
  }
  void Commit() { committed_ = true; }

 private:
  bool committed_ = false;
};

absl::Status InitMpi(int* argc, char*** argv, bool* owns, bool* thread_multiple) {
  int finalized = 0;
  LLM_MPI_CHECK(MPI_Finalized(&finalized));
  if (finalized) {
    return absl::FailedPreconditionError("MPI was already finalized in this process");
  }
  int initialized = 0;
  LLM_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    *owns = false;
    LLM_MPI_CHECK(MPI_Query_thread(&provided));
  } else {
    LLM_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    *owns = true;
    // Errors come back as return codes (turned into Status), not process aborts.
    LLM_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  }
  *thread_multiple = provided >= MPI_THREAD_MULTIPLE;
  return absl::OkStatus();
}

absl::Status QueryRanks(int* world_rank, int* world_size, int* local_rank, int* local_size) {
  LLM_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, world_rank));
  LLM_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, world_size));
  MPI_Comm node = MPI_COMM_NULL;
  LLM_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, *world_rank, MPI_INFO_NULL, &node));
  const int rank_rc = MPI_Comm_rank(node, local_rank);
  const int size_rc = MPI_Comm_size(node, local_size);
  MPI_Comm_free(&node);
  LLM_MPI_CHECK(rank_rc);
  LLM_MPI_CHECK(size_rc);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiRuntime>> MpiRuntime::Create(MpiMode mode, int* argc, char*** argv) {
  std::unique_ptr<MpiRuntime> rt(new MpiRuntime(mode));
  if (mode == MpiMode::kSingleProcess) {
    // Touches no MPI state: any number may exist, e.g. several single-process engines in a test.
    rt->thread_multiple_ = true;  // nothing to serialize: no MPI calls are ever made
    return rt;
  }
  if (g_runtime_alive.exchange(true)) {
    return absl::FailedPreconditionError("an MpiRuntime already exists in this process");
  }
  AliveSlot slot;
  {
    absl::Status s = InitMpi(argc, argv, &rt->owns_mpi_, &rt->thread_multiple_);
    if (!s.ok()) return s;
    s = QueryRanks(&rt->world_rank_, &rt->world_size_, &rt->local_rank_, &rt->local_size_);
    if (!s.ok()) return s;  // ~MpiRuntime finalizes what was initialized
  }
  internal::SetPollYieldWindow(
      ChoosePollYieldWindow(rt->local_size_, std::thread::hardware_concurrency(), std::getenv("LLM_POLL_YIELD_US")));
  slot.Commit();
  return rt;
}

absl::Duration ChoosePollYieldWindow(int local_size, unsigned cores, const char* env_us) {
  int64_t us = 0;
  if (env_us != nullptr && absl::SimpleAtoi(env_us, &us) && us >= 0) return absl::Microseconds(us);
  if (local_size >= 1 && cores >= 2u * static_cast<unsigned>(local_size)) return absl::Milliseconds(50);
  return absl::Milliseconds(1);
}

MpiRuntime::~MpiRuntime() {
  if (mode_ == MpiMode::kSingleProcess) return;
  if (owns_mpi_) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  g_runtime_alive.store(false);
}

bool MpiRuntime::LaunchedByMpiLauncher() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

absl::StatusOr<Topology> MpiRuntime::MakeTopology(int tp, int pp) const {
  return Topology::Create(world_size_, world_rank_, local_rank_, local_size_, tp, pp);
}

}  // namespace llm
