// CpuBackend: the float32 reference implementation of every backend op. It is the oracle the CUDA
// backend is tested against and lets every test run in CI. Weights and activations are float32
// whatever the checkpoint stores.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/cpu/cpu_kernels.h"
#include "engine/backend/cpu/thread_pool.h"

namespace llm {

struct CpuBackendOptions {
  int num_threads = 0;  // <= 0: all hardware threads
  // Emulate a W8A8 GPU: Linear quantizes its input to FP8 as the weight declares
  // (LinearWeight::input_quant: per token, static per tensor or per 128-column group) before the
  // float32 product, so that the CUDA path can be compared with an emulation of itself. Off, the
  // oracle computes on the dequantized weights with float32 inputs, as the fixtures' references do.
  bool emulate_fp8_activations = false;
  // With the emulation: AddRmsNorm and SiluMul quantize their outputs for a W8A8 consumer
  // (Backend::TakesFp8Input), as the CUDA backend does; off, Linear quantizes its input itself.
  // Both give the same values (the fused path is tested against the unfused one).
  bool fuse_fp8_input_quant = true;
  // Take int4 weights with float16 scales only, as the CUDA backend stores them, so that the GPU's
  // storage runs through the oracle (the default, float32 scales, is exact for every checkpoint).
  bool int4_fp16_scales = false;
  // Steps of up to these many rows take the decoder's fused norm and residual path
  // (Backend::FusesRmsNormInto, AddsIntoResidual) and its QKV-RoPE end (FusesQkvRope), as the
  // CUDA GEMVs' decode steps do (the int4 GEMV forms the norm and the add up to 32 rows, RoPE up
  // to 8), so that CI runs both combinations; the oracle still runs the ops apart (the Backend
  // defaults), with the same values.
  int64_t fused_norm_max_rows = 32;
  int64_t fused_rope_max_rows = 8;
};

class CpuBackend final : public Backend {
 public:
  // num_threads <= 0: all hardware threads.
  explicit CpuBackend(int num_threads = 0);
  explicit CpuBackend(const CpuBackendOptions& options);

  Device device() const override { return Device{DeviceKind::kCpu, 0}; }
  DType activation_dtype() const override { return DType::kF32; }

  absl::StatusOr<Buffer> Allocate(size_t bytes) override;
  absl::StatusOr<size_t> FreeMemory() const override;
  absl::Status CopyToDevice(Tensor dst, const void* src) override;
  absl::Status CopyToHost(void* dst, Tensor src) override;
  absl::Status UploadConverted(const void* src, DType src_dtype, Tensor dst) override;
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Embedding(Tensor table, Tensor ids, int64_t vocab_offset, Tensor out) override;
  absl::Status RmsNorm(Tensor x, Tensor weight, float eps, Tensor out) override;
  absl::Status AddRmsNorm(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out) override;
  absl::Status Add(Tensor x, Tensor y) override;
  absl::Status Linear(Tensor x, const LinearWeight& w, Tensor out) override;
  absl::Status QkvRope(const QkvRopeArgs& args) override;
  absl::Status Attention(const AttentionArgs& args) override;
  absl::Status SiluMul(Tensor gate_up, Tensor out) override;
  absl::Status GatherRows(Tensor x, Tensor rows, Tensor out) override;
  bool TakesFp8Input(const LinearWeight& w, int64_t rows) const override;
  bool FusesRmsNormInto(const LinearWeight& w, int64_t rows) const override {
    return rows <= options_.fused_norm_max_rows;
  }
  bool AddsIntoResidual(const LinearWeight& w, int64_t rows) const override {
    return rows <= options_.fused_norm_max_rows;
  }
  bool FusesQkvRope(const LinearWeight& w, const QkvRopeArgs& rope, int64_t rows) const override {
    return rows <= options_.fused_rope_max_rows;
  }
  // As the CUDA backend's cuBLASLt rows do (its scales applied by the op after the linear), so
  // that CI runs the decoder's paths through these ops; the oracle composes them (Backend's).
  bool FusesFp8InputQkvRope(const LinearWeight& w, const QkvRopeArgs& rope, int64_t rows) const override {
    return true;
  }
  bool FusesLinearAddRmsNorm(const LinearWeight& w, int64_t rows) const override {
    return rows > options_.fused_norm_max_rows;
  }
  absl::Status AddRmsNormFp8(Tensor residual, Tensor delta, Tensor weight, float eps, Tensor out,
                             const LinearWeight& consumer, Fp8Input quantized) override;
  absl::Status SiluMulFp8(Tensor gate_up, Tensor out, const LinearWeight& consumer, Fp8Input quantized) override;
  absl::Status LinearFp8Input(Tensor x, Fp8Input quantized, const LinearWeight& w, Tensor out) override;
  absl::Status EnqueueSample(const SampleArgs& args) override;
  absl::Status ReadSampleResults(int slot, absl::Span<SampleResult> results) override;
  absl::Status ResolvePendingTokens(Tensor ids, Tensor sampled) override;

  // Float32 weights, FP8 E4M3 at any scale granularity, or int4 with float32 or float16 scales
  // (dequantized tile by tile in Linear).
  bool SupportsLinearFormat(const StorageFormat& format) const override;
  // Float32, or FP8 E4M3 (quantized on write with the layer's scale, dequantized on read).
  bool SupportsKvCacheDType(DType dtype) const override;

  int num_threads() const { return pool_.num_threads(); }
  const CpuBackendOptions& options() const { return options_; }

 private:
  // Writes out's rows quantized for `consumer` into `quantized` (the fused ops' second half).
  absl::Status QuantizeFor(Tensor out, const LinearWeight& consumer, Fp8Input quantized, const char* op);
  // Linear's checks, then y = x · Wᵀ + b with `quantized_x` (x as the emulation quantized it;
  // FP8 weights only) standing for x when set.
  absl::Status LinearWithInput(Tensor x, const float* quantized_x, const LinearWeight& w, Tensor out);

  CpuBackendOptions options_;
  ThreadPool pool_;
  std::vector<float> quantized_input_;  // Linear's emulated FP8 input, grown on first use
  std::vector<float> permuted_input_;   // an act-order int4 Linear's input in storage order
  std::vector<cpu::SamplerScratch> sampler_scratch_;
  // Each slot's results; and rows whose pending output token is appended to their outputs.
  std::array<std::vector<SampleResult>, kSampleSlots> sample_slots_;
  std::vector<SampleRow> rows_with_pending_;
  std::vector<std::vector<int32_t>> outputs_with_pending_;
};

}  // namespace llm
