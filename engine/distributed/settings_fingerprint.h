// SettingsFingerprint: the settings every rank of a group must share, compared before anything
// collective runs. Ranks that disagree (another --max-context, another model on one host) would
// otherwise load, then reject each other's steps or wait in a collective the others never enter;
// instead start-up fails at once, naming the first setting that differs and both values.
//
// What it holds, as (name, value) pairs in a fixed order, names as the operator knows them:
//   the model's identity: config.json and generation_config.json (size and a hash of the bytes),
//   the weight files' names, and for each its size and a hash of its safetensors header (the
//   tensors' names, dtypes, shapes and offsets: the data itself is not read);
//   every flag that shapes a rank's share or its kernels: --tp, --pp, --layers-per-stage,
//   --dtype, --device, --quantization, --kv-cache-dtype, --emulate-fp8, --fixed-kernels,
//   --max-context, --max-seqs, --max-tokens-per-step, --block-size, --kv-cache-blocks,
//   --kv-cache-fraction, --gpu-memory-fraction, --dummy-weights, --no-overlap.
// The front end of a worker group (--workers) compares each new group's fingerprint with the
// first group's, so a restart never serves a different model or shape than the requests began on.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/distributed/engine_group.h"
#include "parallel/mpi_communicator.h"

namespace llm {

struct Setting {
  std::string name;
  std::string value;
  friend bool operator==(const Setting&, const Setting&) = default;
};
using SettingsFingerprint = std::vector<Setting>;

// The model's config files alone ("model config.json", "model generation_config.json"): what a
// front end, which loads no weights, can check a worker group against.
absl::StatusOr<SettingsFingerprint> ModelConfigFingerprint(const std::filesystem::path& dir);

// Reads the model folder's config and weight headers. NotFound/DataLoss naming the file when one
// cannot be read.
absl::StatusOr<SettingsFingerprint> ComputeSettingsFingerprint(const EngineBuildOptions& build,
                                                               const ParallelOptions& parallel);

// "--max-context is 256 on rank 0 but 128 on rank 1": the first setting where `b` differs from
// `a` (a setting only one of them has counts as differing); nullopt when they are equal.
std::optional<std::string> FirstDifference(const SettingsFingerprint& a, const std::string& a_name,
                                           const SettingsFingerprint& b, const std::string& b_name);

// A flat byte string of the fingerprint (for the worker protocol), and back (DataLoss when
// malformed).
std::string EncodeFingerprint(const SettingsFingerprint& fingerprint);
absl::StatusOr<SettingsFingerprint> DecodeFingerprint(std::string_view bytes);

// Collective over `world`: every rank compares its fingerprint with rank 0's. OK when all agree;
// otherwise every rank returns the same InvalidArgument naming the first differing setting of the
// lowest rank that differs, with both values.
absl::Status AgreeOnSettings(MpiCommunicator& world, const SettingsFingerprint& mine);

}  // namespace llm
