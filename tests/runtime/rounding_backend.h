// The float32 CPU backend with bfloat16 or float16 rounding applied at chosen points of the
// forward pass: what a 16-bit engine stores between its ops (weights, the residual stream, each
// op's output, the KV cache), computed otherwise exactly. It separates the error that the format
// itself costs from any kernel's error, so the CUDA backend's 16-bit parity is judged against what
// the format allows on the same model, and it shows which stored value costs how much
// (rounding_emulation_test prints the table).
#pragma once

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/kv_cache/kv_block_pool.h"
#include "engine/runtime/model_runner.h"
#include "tests/runtime/fixture_reference.h"

namespace llm::testing {

// Where a 16-bit engine rounds. Each point is a value it keeps in memory in 16 bits.
enum RoundingPoint : unsigned {
  kRoundWeights = 1u << 0,     // every weight (checkpoints stored in float32/float16)
  kRoundNormOut = 1u << 1,     // RMSNorm outputs (the linear layers' inputs)
  kRoundResidual = 1u << 2,    // the residual stream after each add
  kRoundLinearOut = 1u << 3,   // linear outputs (QKV, O, gate/up, down); not the float32 logits
  kRoundQkvCache = 1u << 4,    // q after RoPE, and the K/V cache
  kRoundAttention = 1u << 5,   // attention outputs
  kRoundActivation = 1u << 6,  // SiLU(gate) * up
  kRoundAll = (1u << 7) - 1,
};

struct RoundingPointName {
  unsigned point;
  const char* name;
};
inline constexpr RoundingPointName kRoundingPointNames[] = {
    {kRoundWeights, "weights"},         {kRoundNormOut, "norm outputs"},        {kRoundResidual, "residual stream"},
    {kRoundLinearOut, "linear outputs"}, {kRoundQkvCache, "q and KV cache"},    {kRoundAttention, "attention outputs"},
    {kRoundActivation, "SiLU*up"}};

// Rounds float32 values in place to the nearest `format` value (bf16 or f16).
inline void RoundTo(DType format, Tensor t) {
  if (t.dtype() != DType::kF32) return;  // FP8 bytes and integers are stored as they are
  float* p = t.data_as<float>();
  for (int64_t i = 0; !t.empty() && i < t.numel(); ++i)
    p[i] = format == DType::kBF16 ? Bf16ToFloat(FloatToBf16(p[i])) : Fp16ToFloat(FloatToFp16(p[i]));
}

class RoundingBackend final : public Backend {
 public:
  // `format`: kBF16 or kF16. `vocab`: the LM head's output rows, whose float32 logits are left
  // unrounded. With `fp8` (the CPU options' emulation included) the loader may hand over FP8
  // weights and the KV cache may be FP8, as on a 16-bit GPU running an FP8 model; their float32
  // scales are then left unrounded, so kRoundWeights must be off (FP8 checkpoints and bf16 ones
  // quantized at load hold no float32 linear weights to round).
  RoundingBackend(DType format, unsigned points, int64_t vocab, bool fp8 = false, CpuBackendOptions cpu = {2})
      : cpu_(cpu), format_(format), points_(points), vocab_(vocab), fp8_(fp8) {}

  Device device() const override { return cpu_.device(); }
  DType activation_dtype() const override { return cpu_.activation_dtype(); }
  absl::StatusOr<Buffer> Allocate(size_t bytes) override { return cpu_.Allocate(bytes); }
  absl::StatusOr<size_t> FreeMemory() const override { return cpu_.FreeMemory(); }
  absl::Status CopyToDevice(Tensor dst, const void* src) override { return cpu_.CopyToDevice(dst, src); }
  absl::Status CopyToHost(void* dst, Tensor src) override { return cpu_.CopyToHost(dst, src); }
  absl::Status UploadConverted(const void* src, DType src_dtype, Tensor dst) override {
    return Then(cpu_.UploadConverted(src, src_dtype, dst), kRoundWeights, {dst});
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  absl::Status Embedding(Tensor table, Tensor ids, int64_t vocab_offset, Tensor out) override {
    return cpu_.Embedding(table, ids, vocab_offset, out);  // rows of the (rounded) table: exact
  }
  absl::Status RmsNorm(Tensor x, Tensor weight, float eps, Tensor out) override {
    return Then(cpu_.RmsNorm(x, weight, eps, out), kRoundNormOut, {out});
  }
  absl::Status AddRmsNorm(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out) override {
    // The CUDA kernel rounds the sum it stores, then normalizes that stored value.
    RETURN_IF_ERROR(cpu_.AddRmsNorm(residual, delta, weight, eps, out));
    if (!(points_ & kRoundResidual)) return Then(absl::OkStatus(), kRoundNormOut, {out});
    RoundTo(format_, residual);
    return Then(cpu_.AddRmsNorm(residual, Tensor(), weight, eps, out), kRoundNormOut, {out});
  }
  absl::Status Add(Tensor x, Tensor y) override { return Then(cpu_.Add(x, y), kRoundResidual, {x}); }
  absl::Status Linear(Tensor x, const LinearWeight& w, Tensor out) override {
    return Then(cpu_.Linear(x, w, out), w.out_features() == vocab_ ? 0u : unsigned{kRoundLinearOut}, {out});
  }
  absl::Status QkvRope(const QkvRopeArgs& a) override {
    return Then(cpu_.QkvRope(a), kRoundQkvCache, {a.q_out, a.cache.k, a.cache.v});
  }
  absl::Status Attention(const AttentionArgs& a) override {
    return Then(cpu_.Attention(a), kRoundAttention, {a.out});
  }
  absl::Status SiluMul(Tensor gate_up, Tensor out) override {
    return Then(cpu_.SiluMul(gate_up, out), kRoundActivation, {out});
  }
  absl::Status GatherRows(Tensor x, Tensor rows, Tensor out) override { return cpu_.GatherRows(x, rows, out); }
  absl::Status EnqueueSample(const SampleArgs& args) override { return cpu_.EnqueueSample(args); }
  absl::Status ReadSampleResults(int slot, absl::Span<SampleResult> results) override {
    return cpu_.ReadSampleResults(slot, results);
  }
  absl::Status ResolvePendingTokens(Tensor ids, Tensor sampled) override {
    return cpu_.ResolvePendingTokens(ids, sampled);
  }
  bool SupportsLinearFormat(const StorageFormat& f) const override {
    return fp8_ ? cpu_.SupportsLinearFormat(f) : Backend::SupportsLinearFormat(f);
  }
  bool SupportsKvCacheDType(DType t) const override {
    return fp8_ ? cpu_.SupportsKvCacheDType(t) : Backend::SupportsKvCacheDType(t);
  }

 private:
  absl::Status Then(absl::Status s, unsigned point, std::initializer_list<Tensor> outputs) {
    if (s.ok() && (points_ & point))
      for (const Tensor& t : outputs) RoundTo(format_, t);
    return s;
  }

  CpuBackend cpu_;
  DType format_;
  unsigned points_;
  int64_t vocab_;
  bool fp8_;
};

// Logit agreement with the float32 reference over a fixture's positions.
struct LogitParity {
  int positions = 0, top1 = 0;
  double max_err = 0, sum_err = 0;
  void Add(const float* got, const float* want, int64_t vocab) {
    const double err = RelativeError(got, want, vocab);
    max_err = std::max(max_err, err);
    sum_err += err;
    ++positions;
    top1 += std::max_element(got, got + vocab) - got == std::max_element(want, want + vocab) - want;
  }
  double agreement() const { return positions ? double(top1) / positions : 1.0; }
  double mean_err() const { return positions ? sum_err / positions : 0.0; }
};

// Runner options that fit the teacher-forced runs of every fixture (one sequence of up to 256 tokens).
inline ModelRunnerOptions ParityRunnerOptions() {
  ModelRunnerOptions options;
  options.limits.max_tokens = 256;
  options.limits.max_seqs = 4;
  options.limits.max_logit_rows = 256;
  options.block_size = 16;
  options.num_kv_blocks = 16;
  options.max_context = 256;
  return options;
}

// Fixture `name` on `runner`, teacher-forced over the positions the CUDA parity test checks:
// every prompt position, and each of the 24 greedy positions (the context plus the reference's
// greedy tokens, prefilled whole: the same math as decoding them).
inline absl::StatusOr<LogitParity> TeacherForcedParity(ModelRunner& runner, const std::string& name) {
  const int64_t vocab = runner.config().vocab_size;
  LogitParity parity;
  std::vector<float> logits;
  for (const FixturePrompt& p : LoadFixturePrompts(name)) {
    for (bool greedy : {false, true}) {
      std::vector<int32_t> tokens;
      if (!greedy) {
        tokens = p.prompt;
      } else {  // the generation context drops id 0 (see model_runner_test.cc)
        for (int32_t id : p.prompt)
          if (id != 0) tokens.push_back(id);
        tokens.insert(tokens.end(), p.greedy.begin(), p.greedy.end() - 1);
      }
      const int64_t len = static_cast<int64_t>(tokens.size());
      StepPlan plan;
      plan.block_table_width = runner.block_table_width();
      plan.Clear();
      std::vector<int32_t> blocks(KvBlockTable::BlocksFor(len, 16));
      std::iota(blocks.begin(), blocks.end(), 0);
      plan.AddSequence(tokens, 0, blocks, 16, true);
      plan.logit_rows.resize(len);
      std::iota(plan.logit_rows.begin(), plan.logit_rows.end(), 0);
      logits.resize(len * vocab);
      RETURN_IF_ERROR(runner.ComputeLogits(plan, logits.data()));
      if (!greedy) {
        for (int64_t r = 0; r < len; ++r) parity.Add(&logits[r * vocab], &p.prefill_logits[r * vocab], vocab);
      } else {
        const int64_t n = static_cast<int64_t>(p.greedy.size());
        for (int64_t j = 0; j < n; ++j) parity.Add(&logits[(len - n + j) * vocab], &p.greedy_logits[j * vocab], vocab);
      }
    }
  }
  return parity;
}

// Runs fixture `name` with rounding to `format` at `points` (TeacherForcedParity).
inline absl::StatusOr<LogitParity> EmulatedParity(const std::string& name, DType format, unsigned points) {
  const std::string dir = ModelDir(name);
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(config, *checkpoint,
                                                    std::make_unique<RoundingBackend>(format, points, config.vocab_size),
                                                    nullptr, ParityRunnerOptions()));
  return TeacherForcedParity(*runner, name);
}

}  // namespace llm::testing
