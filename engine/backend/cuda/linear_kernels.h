// The CUDA backend's linear-kernel room: which kernel runs y = x · Wᵀ (+ b) for a given
// (activation dtype, weight storage format, shape), and running it. CudaBackend::Linear checks
// the tensors and hands the call here; the policy (a forced form, the ring GEMV for 1-2 rows, a
// per-shape timing of the GEMV forms against cuBLASLt, cuBLASLt's own tuning pass) lives here
// alone, so that further weight formats add their kernels beside these without touching the
// backend. CUDA headers stay out of this header.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "kernels/cuda/norm/fused_rms_norm.h"
#include "kernels/cuda/rope/qkv_rope.h"

namespace llm {

namespace cuda {
class CublasLtGemm;
}  // namespace cuda

enum class LinearKernel : uint8_t {
  // 16/32-bit weights.
  kCublasLt,     // cuBLASLt GEMM on 16/32-bit operands
  kGemv,         // the register GEMV, LinearKernelChoice::warps_per_row warps per output row
  kGemvRing,     // the GEMV's shared-memory ring form (gemv_smem_ring.cuh)
  kGemmFewRows,  // the tensor-core GEMM for a few rows, stream-K over the SMs (gemm_few_rows.h)
  // FP8 E4M3 weights (gemv_fp8.h, cublaslt_gemm.h, gemm_fp8_dequant.h).
  kFp8Gemv,         // register GEMV dequantizing in registers, 16-bit x (W8A16)
  kFp8GemvRing,     // its shared-memory ring form
  kFp8GemvMma,      // the ring form on the tensor cores (gemv_fp8_mma.cuh): per-tensor/channel scales
  kFp8CublasLt,     // x quantized to FP8 as the weight declares (fp8_quantize.h), then cuBLASLt's FP8 GEMM
                    // (W8A8)
  kFp8Dequant,      // tensor-core GEMM on weights widened in shared memory, 16-bit x (W8A16): what neither
                    // cuBLASLt nor kFp8Wgmma takes
  kFp8GemmFewRows,  // the few-rows GEMM widening E4M3 in registers, 16-bit x (W8A16): one scale a row
  kFp8Wgmma,        // x quantized as kFp8CublasLt, then the warpgroup GEMM (gemm_fp8_wgmma.h, W8A8)
  kFp8W8A8Gemv,     // x quantized as kFp8CublasLt, then the W8A8 GEMV (gemv_fp8_w8a8.h): 1-16 rows
  // Int4 weights, 16-bit x (W4A16: gemv_w4a16_mma.h, w4a16_dequant.h, gemm_w4a16.h); act-order
  // inputs permuted first.
  kW4A16MmaGemv,      // the decode batches' kernel: GEMV on the tensor cores (gemv_w4a16_mma.h)
  kW4A16DequantGemm,  // larger batches: slices of rows widened to 16 bits, each cuBLASLt's (w4a16_dequant.h)
  kW4A16Gemm,         // tensor-core GEMM on codes in registers: where the workspace holds no slice
  kW4A16GemmFewRows,  // the few-rows GEMM forming (code - zero) in registers (gemm_few_rows.h): regular
                      // groups
  kW4A16Wgmma,  // the warpgroup GEMM, fragments formed in registers (gemm_w4a16_wgmma.h): regular groups
};

struct LinearKernelChoice {
  LinearKernel kernel = LinearKernel::kCublasLt;
  int warps_per_row = 0;  // kGemv: 1, 2, 4 or 8; 0: the GEMV's own rule (GemvAutoWarpsPerRow)
  // "cublasLt", "gemv", "gemv ring" (op timing labels).
  std::string_view Name() const;
  bool operator==(const LinearKernelChoice&) const = default;
};

// Backend::LinearAddRmsNorm's end, where the linear's kernel takes it (LinearCall::add_norm):
// residual += the product (rounded to the activation dtype), then normed = RmsNorm(residual,
// weight, eps), also quantized for the next linear where `quantized` is set (AddRmsNormFp8).
struct AddRmsNormEnd {
  Tensor residual;
  Tensor weight;
  float eps = 0.0f;
  Tensor normed;
  const cuda::Fp8RowOutput* quantized = nullptr;
};

// One Linear call, checked by the backend: x [m, k] in `act`, out [m, n] in `act` or f32.
struct LinearCall {
  Tensor x;
  const LinearWeight* w = nullptr;
  Tensor out;
  int64_t m = 0, n = 0, k = 0;
  DType act = DType::kBF16;
  // x also quantized as the weight declares, by the op that wrote it (Backend::LinearFp8Input):
  // the W8A8 kernels read it instead of quantizing x; the others read x.
  const Fp8Input* quantized = nullptr;
  // > 0: the gate/up call of Backend::LinearSiluMul, fused where TakesGlu says so: W [2F, K] with
  // F = glu_cols, and `out` [m, F] receives silu(gate) * up (rounded as Linear then SiluMul).
  int64_t glu_cols = 0;
  // Set (Backend::RmsNormLinear, where Fuses says so): x holds the rows before their RMSNorm by
  // this weight and epsilon, which the kernel forms itself with the norm kernel's roundings.
  cuda::FusedRmsNorm norm;
  // Backend::LinearAddInto, where Fuses says so: `out` is the residual, and receives
  // out + (the product rounded to the activation dtype), rounded: Linear then AddRmsNorm's add.
  bool add_to_out = false;
  // Set (Backend::LinearQkvRope, where Fuses says so): the QKV projection's outputs go through
  // RoPE into the query tensor and the KV cache (this QkvRope's), `out` left unwritten.
  const cuda::QkvRopeParams* rope = nullptr;
  // Set (Backend::LinearAddRmsNorm, where Fuses says so): `out` is scratch, left unwritten where
  // the kernel after the GEMM is the norm's (below, Fuses).
  const AddRmsNormEnd* add_norm = nullptr;
};

// What the room needs from the backend at each call.
struct LinearContext {
  CUstream_st* stream = nullptr;
  int num_sms = 0;
  int l2_bytes = 0;
  double dram_bytes_per_second = 0;  // the GPU's peak, from its memory clock and bus width
  cuda::CublasLtGemm* gemm = nullptr;
  // kFp8CublasLt's quantized activations and their scales, a chunk of rows at a time; int4
  // act-order linears' permuted inputs.
  void* fp8_workspace = nullptr;
  size_t fp8_workspace_bytes = 0;
  bool capturing = false;    // a graph capture is open: nothing may be timed
  bool timing = false;       // per-op timing is on: nothing may be timed either
  bool tuning_pass = false;  // Backend::SetTuningPass
  bool fp8_fast_accumulation = false;  // CudaBackendOptions::fp8_fast_accumulation
  const float* unit_scale = nullptr;   // a device float 1.0 (null: no raw FP8 sums on cuBLASLt)
  // kGemmFewRows's and kFp8Wgmma's float32 sums of tiles that straddle blocks (zero between calls).
  void* few_rows_workspace = nullptr;
  size_t few_rows_workspace_bytes = 0;
};

class LinearKernels {
 public:
  // `options` is the backend's own (tests and benchmarks change it between calls).
  explicit LinearKernels(const CudaBackendOptions& options) : options_(options) {}

  // The kernel for `call`. On the first eager call of a shape that the options let it time, times
  // the candidates on the call's operands and keeps the fastest for the process (it synchronizes
  // the stream); in a tuning pass, cuBLASLt shapes time cuBLASLt's algorithms the same way.
  absl::StatusOr<LinearKernelChoice> Choose(const LinearCall& call, const LinearContext& ctx);
  absl::Status Run(const LinearCall& call, LinearKernelChoice choice, const LinearContext& ctx);
  // Whether `call` (its x and out may be empty: only shapes and dtypes are read) runs a W8A8
  // kernel that can read x pre-quantized (LinearCall::quantized): per-token or static input
  // quantization, the warpgroup GEMM or cuBLASLt's FP8 GEMM.
  // Asks cuBLASLt where it would run the call (a refusal is remembered and the answer is no), so
  // that a yes means the W8A8 GEMM reads only the quantized input, never the 16-bit x.
  bool TakesFp8Input(const LinearCall& call, const LinearContext& ctx);
  // Whether `choice` can run `call` (a gate/up weight [2F, K]) in its gate/up form (the register
  // GEMVs: 16-bit, FP8 and int4), writing silu(gate) * up (LinearCall::glu_cols) in one kernel.
  // Only where the fused kernel sums exactly as the plain one (the same split of K), so that the
  // fusion changes no output bit.
  bool TakesGlu(const LinearCall& call, LinearKernelChoice choice, const LinearContext& ctx) const;
  // Whether `choice` can run `call` with its input's RMSNorm (`norm`: with LinearCall::norm set)
  // and/or its residual add (`add`: LinearCall::add_to_out), and with LinearCall::rope its QKV-RoPE
  // end, in the kernel, every output bit as the ops run apart: the FP8 and int4 register GEMVs of
  // decode's few rows (the norm where the grid is one wave). With LinearCall::add_norm, or rope
  // and kFp8CublasLt: whether cuBLASLt's raw sums go to the end's kernel with their scales
  // pending (Fp8PendingScales: QkvRope, the add and norm) instead of a pass of their own.
  bool Fuses(const LinearCall& call, LinearKernelChoice choice, bool norm, bool add, const LinearContext& ctx) const;
  // The same for the kernel Choose would pick (FP8 and int4 weights, whose kernels a rule picks;
  // the 16-bit GEMVs fuse nothing): whether the decoder should ask for the fused op.
  bool FusesChosen(const LinearCall& call, bool norm, bool add, const LinearContext& ctx) const;

 private:
  using ShapeKey = std::tuple<int64_t, int64_t, int64_t, DType, bool>;  // m, n, k, output dtype, bias
  // The GEMV forms (1, 2, 4 and 8 warps a row) against cuBLASLt, each after an RMSNorm as in a step.
  absl::StatusOr<LinearKernelChoice> TimeGemvAgainstCublas(const LinearCall& call, const LinearContext& ctx);
  absl::Status TuneCublas(const LinearCall& call, const LinearContext& ctx);
  LinearKernelChoice ChooseFp8(const LinearCall& call, const LinearContext& ctx) const;
  // What runs an FP8 call that cuBLASLt does not take: the warpgroup GEMM (W8A8) where it can,
  // else the dequantizing GEMM.
  LinearKernelChoice Fp8WithoutCublas(const LinearCall& call, const LinearContext& ctx) const;
  // Remembers that cuBLASLt refused `call` (`why`: logged with LLM_LOG_LINEAR_CHOICE) and returns
  // Fp8WithoutCublas.
  LinearKernelChoice AfterFp8Refusal(const LinearCall& call, const LinearContext& ctx,
                                     const absl::Status& why);

  LinearKernelChoice ChooseW4A16(const LinearCall& call, const LinearContext& ctx) const;
  absl::Status RunW4A16(const LinearCall& call, LinearKernelChoice choice, const LinearContext& ctx);
  absl::Status RunW4A16Dequant(const LinearCall& call, const LinearContext& ctx);
  // Whether an FP8 cuBLASLt call's raw sums (CudaBackendOptions::fp8_split_scales) can go to its
  // end (LinearCall::rope or add_norm) in one chunk of rows, that end's kernel applying the scales.
  bool EndTakesPendingScales(const LinearCall& call, const LinearContext& ctx) const;
  // Quantizes x as the weight declares, then cuBLASLt's FP8 GEMM or the warpgroup GEMM (W8A8).
  absl::Status RunFp8W8A8(const LinearCall& call, LinearKernelChoice choice, const LinearContext& ctx);

  const CudaBackendOptions& options_;
  std::map<ShapeKey, LinearKernelChoice> timed_;  // autotune_linear's winners
  std::set<ShapeKey> cublas_tuned_;               // tune_cublas_max_rows
  // FP8 shapes and scale modes for which cuBLASLt has no algorithm: they take Fp8WithoutCublas.
  // (m, n, k, weight granularity, input quantization) that cuBLASLt refused: its FP8 rules depend
  // on all of them (a static input refused at a shape says nothing of a per-token one).
  std::set<std::tuple<int64_t, int64_t, int64_t, int, int>> fp8_cublas_refused_;
  // Shapes whose raw-sums form (CudaBackendOptions::fp8_split_scales) cuBLASLt refused: not asked again.
  std::set<std::tuple<int64_t, int64_t, int64_t, int, int>> fp8_raw_sums_refused_;
};

}  // namespace llm
