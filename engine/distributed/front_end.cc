#include "engine/distributed/front_end.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/distributed/remote_step_executor.h"

namespace llm {

absl::StatusOr<std::unique_ptr<Engine>> CreateFrontEndEngine(const FrontEndOptions& options,
                                                             std::shared_ptr<const Tokenizer> tokenizer) {
  if (options.replicas.empty()) return absl::InvalidArgumentError("a front end needs at least one worker group");
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(options.build.model_dir));
  ASSIGN_OR_RETURN(SettingsFingerprint expected, ModelConfigFingerprint(options.build.model_dir));
  // Every replica loads at once: start-up takes one model load, not one per replica.
  const size_t n = options.replicas.size();
  std::vector<absl::StatusOr<std::unique_ptr<WorkerGroupSupervisor>>> started;
  for (size_t r = 0; r < n; ++r) started.emplace_back(absl::UnknownError("not started"));
  std::vector<std::thread> threads;
  for (size_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      WorkerGroupOptions group = options.replicas[r];
      group.replica = static_cast<int>(r);
      group.expected_settings = expected;
      started[r] = WorkerGroupSupervisor::Start(group);
    });
  for (std::thread& t : threads) t.join();
  for (const auto& s : started) RETURN_IF_ERROR(s.status());
  // Replicas of one model on equal hardware: the engine takes the first's limits, and every other
  // must be the same (a replica with fewer KV blocks could not hold what the scheduler plans).
  const GroupLimits& limits = (*started[0])->first_hello().limits;
  for (size_t r = 1; r < n; ++r) {
    const EngineInfo& a = limits.info;
    const EngineInfo& b = (*started[r])->first_hello().limits.info;
    if (a.max_context != b.max_context || a.max_tokens_per_step != b.max_tokens_per_step ||
        a.max_seqs != b.max_seqs || a.kv_blocks != b.kv_blocks || a.kv_block_size != b.kv_block_size)
      return absl::FailedPreconditionError(absl::StrCat(
          "replica ", r, " has other limits than replica 0 (KV blocks ", b.kv_blocks, " vs ", a.kv_blocks,
          ", sequences ", b.max_seqs, " vs ", a.max_seqs, ", context ", b.max_context, " vs ", a.max_context,
          "): give every replica the same hardware, or pin --kv-cache-blocks and --max-seqs"));
  }
  EngineInfo info = limits.info;
  info.config = std::move(config);
  const EngineOptions engine_options = EngineOptionsFor(options.build, info, limits.block_table_width);
  std::vector<std::unique_ptr<StepExecutor>> executors;
  for (auto& s : started) executors.push_back(std::make_unique<RemoteStepExecutor>(*std::move(s)));
  return Engine::Create(info, engine_options, std::move(executors), std::move(tokenizer));
}

}  // namespace llm
