#include "engine/distributed/settings_fingerprint.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace llm {
namespace {

// FNV-1a, 64 bits: stable across processes and hosts (absl::Hash is salted per process).
uint64_t Fnv1a(absl::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string Describe(uint64_t size, uint64_t hash) { return absl::StrFormat("%d bytes, hash %016x", size, hash); }

absl::StatusOr<std::string> ReadWhole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path.string()));
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The safetensors header (8-byte length, then that much JSON) and the file's size.
absl::StatusOr<std::string> DescribeWeightFile(const std::filesystem::path& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read ", path.string(), ": ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  if (!in.read(reinterpret_cast<char*>(&header_len), sizeof header_len) || header_len > size - sizeof header_len)
    return absl::DataLossError(absl::StrCat(path.string(), ": not a safetensors file (bad header length)"));
  std::string header(header_len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_len)))
    return absl::DataLossError(absl::StrCat(path.string(), ": truncated safetensors header"));
  return Describe(size, Fnv1a(header));
}

absl::Status AddWeightFiles(const std::filesystem::path& dir, SettingsFingerprint& f) {
  std::vector<std::string> weights;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors") weights.push_back(entry.path().filename().string());
  std::sort(weights.begin(), weights.end());
  f.push_back({"model weight files", absl::StrJoin(weights, ", ")});
  for (const std::string& name : weights) {
    ASSIGN_OR_RETURN(std::string described, DescribeWeightFile(dir / name));
    f.push_back({absl::StrCat("model weights ", name), described});
  }
  return absl::OkStatus();
}

// The index of the first entry where `b` differs from `a`; -1 when equal.
int FirstDifferenceIndex(const SettingsFingerprint& a, const SettingsFingerprint& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (!(a[i] == b[i])) return static_cast<int>(i);
  return a.size() == b.size() ? -1 : static_cast<int>(n);
}

}  // namespace

absl::StatusOr<SettingsFingerprint> ModelConfigFingerprint(const std::filesystem::path& dir) {
  SettingsFingerprint f;
  for (const char* file : {"config.json", "generation_config.json"}) {
    const std::filesystem::path path = dir / file;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      f.push_back({absl::StrCat("model ", file), "absent"});
      continue;
    }
    ASSIGN_OR_RETURN(std::string bytes, ReadWhole(path));
    f.push_back({absl::StrCat("model ", file), Describe(bytes.size(), Fnv1a(bytes))});
  }
  return f;
}

absl::StatusOr<SettingsFingerprint> ComputeSettingsFingerprint(const EngineBuildOptions& b,
                                                               const ParallelOptions& p) {
  ASSIGN_OR_RETURN(SettingsFingerprint f, ModelConfigFingerprint(b.model_dir));
  if (!b.dummy_weights) RETURN_IF_ERROR(AddWeightFiles(b.model_dir, f));
  auto add = [&f](const char* name, auto value) { f.push_back({name, absl::StrCat(value)}); };
  add("--tp", p.tp);
  add("--pp", p.pp);
  f.push_back({"--layers-per-stage", absl::StrJoin(p.layers_per_stage, ",")});
  add("--device", b.device);
  add("--dtype", b.dtype);
  add("--quantization", b.quantization.empty() ? "none" : b.quantization);
  add("--kv-cache-dtype", b.kv_cache_dtype);
  add("--emulate-fp8", b.emulate_fp8_activations ? "on" : "off");
  add("--fixed-kernels", b.time_linear_kernels ? "off" : "on");
  add("--max-context", b.max_context);
  add("--max-seqs", b.max_seqs);
  add("--max-tokens-per-step", b.max_tokens_per_step);
  add("--block-size", b.block_size);
  add("--kv-cache-blocks", b.num_kv_blocks);
  add("--kv-cache-fraction", b.kv_cache_fraction);
  add("--gpu-memory-fraction", b.gpu_memory_fraction);
  add("--dummy-weights", b.dummy_weights ? "on" : "off");
  add("--no-overlap", b.overlap_steps ? "off" : "on");
  return f;
}

std::optional<std::string> FirstDifference(const SettingsFingerprint& a, const std::string& a_name,
                                           const SettingsFingerprint& b, const std::string& b_name) {
  const int i = FirstDifferenceIndex(a, b);
  if (i < 0) return std::nullopt;
  const size_t k = static_cast<size_t>(i);
  const Setting* in_a = k < a.size() ? &a[k] : nullptr;
  const Setting* in_b = k < b.size() ? &b[k] : nullptr;
  if (in_a && in_b && in_a->name == in_b->name)
    return absl::StrCat(in_a->name, " is '", in_a->value, "' on ", a_name, " but '", in_b->value, "' on ", b_name);
  auto describe = [](const Setting* s) { return s ? absl::StrCat(s->name, " '", s->value, "'") : std::string("nothing"); };
  return absl::StrCat(a_name, " has ", describe(in_a), " where ", b_name, " has ", describe(in_b));
}

std::string EncodeFingerprint(const SettingsFingerprint& fingerprint) {
  std::string out;
  auto put = [&out](std::string_view s) {
    const uint32_t n = static_cast<uint32_t>(s.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out.append(s);
  };
  for (const Setting& s : fingerprint) {
    put(s.name);
    put(s.value);
  }
  return out;
}

absl::StatusOr<SettingsFingerprint> DecodeFingerprint(std::string_view bytes) {
  SettingsFingerprint f;
  size_t pos = 0;
  auto get = [&](std::string* s) {
    uint32_t n = 0;
    if (bytes.size() - pos < sizeof n) return false;
    std::memcpy(&n, bytes.data() + pos, sizeof n);
    pos += sizeof n;
    if (bytes.size() - pos < n) return false;
    s->assign(bytes.data() + pos, n);
    pos += n;
    return true;
  };
  while (pos < bytes.size()) {
    Setting s;
    if (!get(&s.name) || !get(&s.value)) return absl::DataLossError("malformed settings fingerprint");
    f.push_back(std::move(s));
  }
  return f;
}

absl::Status AgreeOnSettings(MpiCommunicator& world, const SettingsFingerprint& mine) {
  if (world.size() == 1) return absl::OkStatus();
  std::string first = world.rank() == 0 ? EncodeFingerprint(mine) : std::string();
  RETURN_IF_ERROR(world.BroadcastBytes(&first, 0));
  ASSIGN_OR_RETURN(SettingsFingerprint rank0, DecodeFingerprint(first));
  const int32_t mine_index = FirstDifferenceIndex(rank0, mine);
  std::vector<int32_t> indices(world.size());
  RETURN_IF_ERROR(world.AllGather(&mine_index, indices.data(), 1, DType::kI32));
  // The lowest rank that differs explains; every rank reports its words.
  int culprit = -1;
  for (int r = 0; r < world.size() && culprit < 0; ++r)
    if (indices[r] >= 0) culprit = r;
  if (culprit < 0) return absl::OkStatus();
  std::string what =
      world.rank() == culprit ? *FirstDifference(rank0, "rank 0", mine, absl::StrCat("rank ", culprit)) : std::string();
  RETURN_IF_ERROR(world.BroadcastBytes(&what, culprit));
  return absl::InvalidArgumentError(absl::StrCat(
      "the ranks were started with different settings: ", what,
      " (every rank of a group needs the same flags and the same model files)"));
}

}  // namespace llm
