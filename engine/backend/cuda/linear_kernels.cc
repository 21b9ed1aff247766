#include "engine/backend/cuda/linear_kernels.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/cuda/common/candidate_timing.h"
#include "kernels/cuda/elementwise/elementwise.h"
#include "kernels/cuda/gemm/cublaslt_gemm.h"
#include "kernels/cuda/gemm/gemm_few_rows.h"
#include "kernels/cuda/gemm/gemm_fp8_dequant.h"
#include "kernels/cuda/gemm/gemm_fp8_wgmma.h"
#include "kernels/cuda/gemm/gemm_w4a16.h"
#include "kernels/cuda/gemm/gemm_w4a16_wgmma.h"
#include "kernels/cuda/gemm/gemv.h"
#include "kernels/cuda/gemm/gemv_fp8.h"
#include "kernels/cuda/gemm/gemv_fp8_w8a8.h"
#include "kernels/cuda/gemm/gemv_w4a16_mma.h"
#include "kernels/cuda/gemm/w4a16_dequant.h"
#include "kernels/cuda/gemm/w4a16_permute.h"
#include "kernels/cuda/norm/rms_norm.h"
#include "kernels/cuda/quant/fp8_gemm_scales.h"
#include "kernels/cuda/quant/fp8_quantize.h"

namespace llm {
namespace {

// LLM_LOG_LINEAR_CHOICE=1: the decode linears' kernel choices and their timings, on stderr.
bool LogLinearChoice() {
  static const bool on = [] {
    const char* v = std::getenv("LLM_LOG_LINEAR_CHOICE");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

const void* BiasOf(const LinearCall& c) { return c.w->bias.empty() ? nullptr : c.w->bias.data(); }

// The row cut-overs between the widening kernels and the warpgroup GEMMs, each the option's value
// unless it is CudaBackendOptions::kByDevice: then by the GPU's peak DRAM bandwidth, as measured
// (cuda_backend.h says where): an H100 SXM (3.35 TB/s) takes the first values, an H200 (4.8 TB/s)
// the second. Between them nothing was measured; 4 TB/s splits them.
struct RowCutovers {
  int fp8_gemv_max, fp8_few_rows_max, fp8_wgmma_max, fp8_w8a8_gemv_max;
};
RowCutovers RowCutoversFor(const CudaBackendOptions& o, const LinearContext& ctx) {
  const bool fast_memory = ctx.dram_bytes_per_second >= 4e12;
  auto pick = [&](int option, int slow, int fast) {
    return option != CudaBackendOptions::kByDevice ? option : fast_memory ? fast : slow;
  };
  return {pick(o.fp8_gemv_max_rows, cuda::kGemvMaxRows, 1), pick(o.gemm_few_rows_max_rows, 8, 0),
          pick(o.gemm_fp8_wgmma_max_rows, 32, 16), pick(o.fp8_w8a8_gemv_max_rows, 0, 8)};
}

absl::Status RunGemv(const LinearCall& c, LinearKernelChoice choice, const CudaBackendOptions& o,
                     const LinearContext& ctx) {
  cuda::GemvOptions go;
  go.pdl = o.programmatic_launch;
  go.num_sms = ctx.num_sms;
  go.warps_per_row = choice.kernel == LinearKernel::kGemv ? choice.warps_per_row : 0;
  go.smem_ring = choice.kernel == LinearKernel::kGemvRing;
  go.ring_bytes = o.gemv_ring_bytes;
  go.glu_cols = c.glu_cols;
  return cuda::LaunchGemv(c.act, c.out.dtype(), c.x.data(), c.w->weight.data(), BiasOf(c), c.out.data(), c.m, c.n,
                          c.k, go, ctx.stream);
}

absl::Status RunCublas(const LinearCall& c, const LinearContext& ctx) {
  const void* bias = BiasOf(c);
  if (bias && c.out.dtype() != c.act) {  // cuBLASLt's bias epilogue wants the output's type: add it after
    RETURN_IF_ERROR(ctx.gemm->Run(c.act, c.out.dtype(), c.x.data(), c.w->weight.data(), nullptr, c.out.data(), c.m,
                                  c.n, c.k, ctx.stream));
    return cuda::LaunchAddBias(c.act, c.out.dtype(), c.out.data(), bias, c.m, c.n, ctx.stream);
  }
  return ctx.gemm->Run(c.act, c.out.dtype(), c.x.data(), c.w->weight.data(), bias, c.out.data(), c.m, c.n, c.k,
                       ctx.stream);
}

cuda::Fp8WeightScales WeightScales(const LinearWeight& w) {
  const ScaleGrid g = w.scale_grid();
  return {w.scale.data_as<const float>(), g.rows_per, g.cols_per, g.cols};
}

// cuBLASLt's scale modes for an FP8 weight and the quantization of its input, nullopt where it
// has none (per-row groups) and for weight-only checkpoints (no input quantization declared:
// W8A16, which the dequantizing GEMM computes as declared).
struct CublasFp8Modes {
  cuda::Fp8ScaleMode w = cuda::Fp8ScaleMode::kScalar;
  cuda::Fp8ScaleMode x = cuda::Fp8ScaleMode::kScalar;
  cuda::Fp8ActivationScaling quantize = cuda::Fp8ActivationScaling::kPerToken;
};
std::optional<CublasFp8Modes> CublasModesFor(const LinearWeight& w, int64_t k) {
  CublasFp8Modes m;
  switch (w.format.granularity) {
    case ScaleGranularity::kTensor: m.w = cuda::Fp8ScaleMode::kScalar; break;
    case ScaleGranularity::kChannel: m.w = cuda::Fp8ScaleMode::kOuterVector; break;
    case ScaleGranularity::kBlock:
      // Whole 128 x 128 blocks only: with a partial edge block (N = 320, K = 128 at 16 rows, per
      // token-group inputs) cuBLASLt's block-scaled GEMM was 1.6% from the W8A8 reference on an
      // H100 (cuda_fp8_test LinearEveryFormatShapeAndKernel), 10x the bf16 output's rounding; such
      // weights take the dequantizing GEMM (W8A16).
      if (w.format.block_rows != 128 || w.format.block_cols != 128 || w.out_features() % 128 != 0 || k % 128 != 0)
        return std::nullopt;
      m.w = cuda::Fp8ScaleMode::kBlock128;
      break;
    default: return std::nullopt;
  }
  switch (w.input_quant) {
    case ActivationQuant::kStaticPerTensor:
      m.x = cuda::Fp8ScaleMode::kScalar;
      m.quantize = cuda::Fp8ActivationScaling::kStatic;
      break;
    case ActivationQuant::kDynamicPerGroup:
      if (w.input_group != 128 || k % 128 != 0) return std::nullopt;
      m.x = cuda::Fp8ScaleMode::kVector128;
      m.quantize = cuda::Fp8ActivationScaling::kPerGroup;
      break;
    case ActivationQuant::kDynamicPerToken:
      m.x = cuda::Fp8ScaleMode::kOuterVector;
      m.quantize = cuda::Fp8ActivationScaling::kPerToken;
      break;
    case ActivationQuant::kNone:
      return std::nullopt;
  }
  return m;
}

cuda::W4A16Weights W4Weights(const LinearWeight& w) {
  cuda::W4A16Weights d;
  d.codes = w.weight.data_as<const uint8_t>();
  d.scales = w.scale.data();
  d.zeros = w.zero.empty() ? nullptr : w.zero.data_as<const uint8_t>();
  d.chunk_group = w.chunk_group.data_as<const int32_t>();
  d.groups = w.int4_groups();
  d.group_chunks = w.int4_group_chunks;
  return d;
}

// The few-rows GEMM's view of c's weight, and its K (int4: the storage columns).
cuda::GemmFewRowsWeights FewRowsWeights(const LinearCall& c) {
  cuda::GemmFewRowsWeights w;
  w.data = c.w->weight.data();
  if (c.w->format.int4()) {
    w.type = cuda::GemmFewRowsWeightType::kInt4;
    w.int4 = W4Weights(*c.w);
  } else if (c.w->format.element == DType::kF8E4M3) {
    const ScaleGrid g = c.w->scale_grid();
    w.type = cuda::GemmFewRowsWeightType::kE4M3;
    w.scale = c.w->scale.data_as<const float>();
    w.scale_rows_per = g.rows_per;
  }
  return w;
}
int64_t FewRowsK(const LinearCall& c) { return c.w->format.int4() ? c.w->int4_storage_columns() : c.k; }

// Whether the few-rows GEMM takes `c` with up to `max_rows` rows (its workspace is there).
bool FewRowsTakes(const LinearCall& c, const LinearContext& ctx, int max_rows) {
  return c.m <= max_rows && ctx.few_rows_workspace_bytes >= cuda::GemmFewRowsWorkspaceBytes(ctx.num_sms) &&
         cuda::GemmFewRowsSupports(c.act, c.out.dtype(), FewRowsWeights(c), c.m, c.n, FewRowsK(c));
}

// x: c's input, or (int4 act-order) its rows m0.. in storage-column order.
absl::Status RunGemmFewRows(const LinearCall& c, const CudaBackendOptions& o, const LinearContext& ctx,
                            const void* x, void* out, int64_t m) {
  cuda::GemmFewRowsOptions fo;
  fo.tile_rows = o.gemm_few_rows_tile_rows;
  fo.step_cols = o.gemm_few_rows_step_cols;
  fo.token_split = o.gemm_few_rows_token_split;
  fo.pdl = o.programmatic_launch;
  return cuda::LaunchGemmFewRows(c.act, x, FewRowsWeights(c), BiasOf(c), out, m, c.n, FewRowsK(c), ctx.num_sms,
                                 {ctx.few_rows_workspace, ctx.few_rows_workspace_bytes}, fo, ctx.stream);
}
absl::Status RunGemmFewRows(const LinearCall& c, const CudaBackendOptions& o, const LinearContext& ctx) {
  return RunGemmFewRows(c, o, ctx, c.x.data(), c.out.data(), c.m);
}

absl::Status RunFp8Gemv(const LinearCall& c, LinearKernelChoice choice, const CudaBackendOptions& o,
                        const LinearContext& ctx) {
  cuda::GemvOptions go;
  go.pdl = o.programmatic_launch;
  go.num_sms = ctx.num_sms;
  go.warps_per_row = choice.kernel == LinearKernel::kFp8Gemv ? choice.warps_per_row : 0;
  go.smem_ring = choice.kernel == LinearKernel::kFp8GemvRing || choice.kernel == LinearKernel::kFp8GemvMma;
  go.ring_bytes = o.gemv_ring_bytes;
  go.glu_cols = c.glu_cols;
  go.norm = c.norm;
  go.add_to_out = c.add_to_out;
  go.rope = c.rope;
  if (c.rope != nullptr) go.warps_per_row = 1;
  return cuda::LaunchGemvFp8(c.act, c.out.dtype(), c.x.data(), c.w->weight.data(), WeightScales(*c.w), BiasOf(c),
                             c.out.data(), c.m, c.n, c.k, go, ctx.stream,
                             /*tensor_cores=*/choice.kernel == LinearKernel::kFp8GemvMma);
}

absl::Status RunFp8Dequant(const LinearCall& c, const LinearContext& ctx) {
  return cuda::LaunchGemmFp8Dequant(c.act, c.out.dtype(), c.x.data(), c.w->weight.data(), WeightScales(*c.w),
                                    BiasOf(c), c.out.data(), c.m, c.n, c.k, ctx.stream);
}

// The dequantizing GEMM's use of the workspace: an act-order weight's permuted input rows first
// (at most half of it), then one slice of widened weight rows, as wide as the rest allows: fewer,
// wider GEMMs. (Slices small enough to stay in L2, dropped from it after their GEMM with
// discard.global.L2, were slower on an H100 at every M measured: w4a16_bench, RESULTS.md.)
constexpr int64_t kW4MinSliceRows = 64;  // below this the 4-bit GEMM (no workspace) takes the call
struct W4DequantPlan {
  int64_t x_rows = 0;   // input rows permuted at a time (act-order), else m
  int64_t x_bytes = 0;  // workspace bytes before the slice
  int64_t slice_rows = 0;
};
W4DequantPlan PlanW4Dequant(const LinearCall& c, const LinearContext& ctx) {
  W4DequantPlan p;
  const int64_t kp = c.w->int4_storage_columns(), in_bytes = static_cast<int64_t>(DTypeSize(c.act));
  const int64_t ws = ctx.fp8_workspace == nullptr ? 0 : static_cast<int64_t>(ctx.fp8_workspace_bytes) / 256 * 256;
  p.x_rows = c.m;
  if (!c.w->input_perm.empty()) {
    p.x_rows = std::min<int64_t>(c.m, ws / 2 / (kp * in_bytes));
    p.x_bytes = (p.x_rows * kp * in_bytes + 255) / 256 * 256;
    if (p.x_rows < 1) return p;
  }
  const int64_t rows = (ws - p.x_bytes) / (kp * in_bytes);
  p.slice_rows = rows >= c.n ? c.n : rows / kW4MinSliceRows * kW4MinSliceRows;
  return p;
}

// What cuBLASLt's FP8 rules depend on: the shape and both operands' scale modes.
std::tuple<int64_t, int64_t, int64_t, int, int> Fp8RefusalKey(const LinearCall& c) {
  return {c.m, c.n, c.k, static_cast<int>(c.w->format.granularity), static_cast<int>(c.w->input_quant)};
}

// Rows of x that the FP8 workspace holds at once, quantized, with their scales.
int64_t Fp8ChunkRows(const LinearCall& c, const CublasFp8Modes& modes, const LinearContext& ctx) {
  const int64_t groups = (c.k + 127) / 128;
  const int64_t scale_bytes = modes.quantize == cuda::Fp8ActivationScaling::kPerGroup ? 4 * groups
                              : modes.quantize == cuda::Fp8ActivationScaling::kPerToken ? 4
                                                                                         : 0;
  const int64_t reserve = 1024;  // alignment of the scales after the rows
  return (static_cast<int64_t>(ctx.fp8_workspace_bytes) - reserve) / (c.k + scale_bytes) / 16 * 16;
}

// The FP8 GEMM of x's rows [r0, r0 + rows), quantized into `q` (E4M3) with `scales`.
cuda::Fp8GemmArgs Fp8ArgsFor(const LinearCall& c, const LinearContext& ctx, const CublasFp8Modes& modes, const void* q,
                             const float* scales, int64_t r0, int64_t rows) {
  cuda::Fp8GemmArgs a;
  a.fast_accumulation = ctx.fp8_fast_accumulation;
  a.x = q;
  a.w = c.w->weight.data();
  a.x_scale = modes.quantize == cuda::Fp8ActivationScaling::kStatic ? c.w->input_scale.data_as<const float>() : scales;
  a.w_scale = c.w->scale.data_as<const float>();
  a.x_mode = modes.x;
  a.w_mode = modes.w;
  a.bias = BiasOf(c);
  a.out = static_cast<char*>(c.out.data()) + r0 * c.n * DTypeSize(c.out.dtype());
  a.out_dtype = c.out.dtype();
  a.m = rows;
  a.n = c.n;
  a.k = c.k;
  return a;
}

// Where x's quantized rows and their scales go in the FP8 workspace, a chunk of `rows` at a time.
struct Fp8Chunk {
  char* q = nullptr;
  float* scales = nullptr;
};
Fp8Chunk Fp8ChunkAt(const LinearCall& c, const LinearContext& ctx, int64_t rows) {
  char* q = static_cast<char*>(ctx.fp8_workspace);
  return {q, reinterpret_cast<float*>(q + (rows * c.k + 255) / 256 * 256)};
}

// The FP8 GEMM arguments of the call's first chunk of rows, nullopt where no W8A8 form applies
// (no scale modes for the format, or no row in the workspace).
std::optional<cuda::Fp8GemmArgs> FirstFp8Chunk(const LinearCall& c, const LinearContext& ctx) {
  const std::optional<CublasFp8Modes> modes = CublasModesFor(*c.w, c.k);
  if (!modes || ctx.fp8_workspace == nullptr) return std::nullopt;
  const int64_t rows = std::min<int64_t>(c.m, Fp8ChunkRows(c, *modes, ctx));
  if (rows < 1) return std::nullopt;
  const Fp8Chunk chunk = Fp8ChunkAt(c, ctx, rows);
  return Fp8ArgsFor(c, ctx, *modes, chunk.q, chunk.scales, 0, rows);
}

// The call's FP8 GEMMs, planned (cuBLASLt's heuristic asked) but not run: every row at once where
// x comes quantized (`whole`), else the first chunk and a shorter last one (cuBLASLt refuses some row
// counts, e.g. block-scaled weights at 13 rows, that it takes at 40: found when it ran).
absl::Status ProbeFp8Cublas(const LinearCall& c, const LinearContext& ctx, bool whole) {
  std::optional<cuda::Fp8GemmArgs> first = FirstFp8Chunk(c, ctx);
  if (!first) return absl::UnimplementedError("no cuBLASLt scale modes for this format, or no row in the workspace");
  if (whole) {
    first->m = c.m;
    return ctx.gemm->PlanFp8(*first);
  }
  RETURN_IF_ERROR(ctx.gemm->PlanFp8(*first));
  if (c.m % first->m == 0) return absl::OkStatus();
  cuda::Fp8GemmArgs last = *first;
  last.m = c.m % first->m;
  last.out = static_cast<char*>(c.out.data()) + (c.m - last.m) * c.n * DTypeSize(c.out.dtype());
  return ctx.gemm->PlanFp8(last);
}

// Whether the W8A8 GEMV takes the call (x quantized whole: at most 16 rows).
bool Fp8W8A8GemvTakes(const LinearCall& c, const LinearContext& ctx) {
  if (c.out.dtype() != c.act) return false;
  const std::optional<cuda::Fp8GemmArgs> first = FirstFp8Chunk(c, ctx);
  return first && first->m == c.m && cuda::GemvFp8W8A8Supports(*first);
}

// Whether the warpgroup GEMM takes every chunk of the call (x quantized whole when it fits).
bool Fp8WgmmaTakes(const LinearCall& c, const LinearContext& ctx) {
  if (c.out.dtype() != c.act || ctx.few_rows_workspace_bytes < cuda::GemmFp8WgmmaWorkspaceBytes(ctx.num_sms))
    return false;
  const std::optional<cuda::Fp8GemmArgs> first = FirstFp8Chunk(c, ctx);
  return first && cuda::GemmFp8WgmmaSupports(*first);
}

}  // namespace

std::string_view LinearKernelChoice::Name() const {
  switch (kernel) {
    case LinearKernel::kCublasLt: return "cublasLt";
    case LinearKernel::kGemv: return "gemv";
    case LinearKernel::kGemvRing: return "gemv ring";
    case LinearKernel::kGemmFewRows: return "few-rows gemm";
    case LinearKernel::kFp8Gemv: return "fp8 gemv";
    case LinearKernel::kFp8GemvRing: return "fp8 gemv ring";
    case LinearKernel::kFp8GemvMma: return "fp8 gemv mma";
    case LinearKernel::kFp8CublasLt: return "fp8 cublasLt";
    case LinearKernel::kFp8Dequant: return "fp8 dequant gemm";
    case LinearKernel::kFp8GemmFewRows: return "fp8 few-rows gemm";
    case LinearKernel::kFp8Wgmma: return "fp8 wgmma gemm";
    case LinearKernel::kFp8W8A8Gemv:
      return "fp8 w8a8 gemv";
    case LinearKernel::kW4A16MmaGemv: return "w4a16 mma gemv";
    case LinearKernel::kW4A16DequantGemm: return "w4a16 dequant gemm";
    case LinearKernel::kW4A16Gemm: return "w4a16 gemm";
    case LinearKernel::kW4A16GemmFewRows: return "w4a16 few-rows gemm";
    case LinearKernel::kW4A16Wgmma: return "w4a16 wgmma gemm";
  }
  return "unknown";
}

// FP8 weights: the GEMV forms up to gemv_max_rows (the tensor-core ring where it fits, else forced
// forms and the ring rule as for 16-bit weights; not timed yet), then the few-rows GEMM, the
// warpgroup GEMM, cuBLASLt's FP8 GEMM where it takes the scales, else the dequantizing GEMM.
LinearKernelChoice LinearKernels::ChooseFp8(const LinearCall& c, const LinearContext& ctx) const {
  const CudaBackendOptions& o = options_;
  const RowCutovers cut = RowCutoversFor(o, ctx);
  // Where the rows are in the W8A8 GEMV's range (RowCutovers), x quantized per token or tensor.
  if (c.m >= o.fp8_w8a8_gemv_min_rows && c.m <= cut.fp8_w8a8_gemv_max && Fp8W8A8GemvTakes(c, ctx))
    return {LinearKernel::kFp8W8A8Gemv, 0};
  if (c.m <= o.gemv_max_rows && c.m <= cut.fp8_gemv_max && c.m <= cuda::kGemvMaxRows &&
      cuda::GemvFp8Supported(c.act, c.k, WeightScales(*c.w))) {
    const int wpr = o.gemv_warps_per_row;
    const bool mma_fits =
        cuda::GemvFp8MmaFits(c.act, c.m, c.n, c.k, WeightScales(*c.w), o.gemv_ring_bytes, ctx.num_sms);
    if (!o.autotune_linear && wpr != 0)
      return wpr > 0    ? LinearKernelChoice{LinearKernel::kFp8Gemv, wpr}
             : mma_fits ? LinearKernelChoice{LinearKernel::kFp8GemvMma, 0}
                        : LinearKernelChoice{LinearKernel::kFp8GemvRing, 0};
    // By measurement on an H100 (benchmarks/RESULTS.md, FP8 on the GPU): at one row the register
    // GEMV, one warp a row, beats both rings in the step (its loads start before the dependency
    // wait without staging x); from two rows the tensor-core ring, whose cost does not grow with
    // the rows (so no gemv_ring_max_rows), is far ahead.
    if (c.m == 1) return {LinearKernel::kFp8Gemv, 1};
    if (o.gemv_smem_ring && mma_fits) return {LinearKernel::kFp8GemvMma, 0};
    if (o.gemv_smem_ring && c.m <= o.gemv_ring_max_rows &&
        cuda::GemvFp8RingFits(c.act, c.m, c.n, c.k, o.gemv_ring_bytes, ctx.num_sms))
      return {LinearKernel::kFp8GemvRing, 0};
    return {LinearKernel::kFp8Gemv, 0};
  }
  // 5 to 8 rows where the memory is slow enough (RowCutovers), one weight scale a row: the
  // few-rows GEMM widening E4M3 in registers (W8A16, as the GEMV forms below it; x is not
  // quantized even where the weight declares it), which streams W at up to 2x cuBLASLt's W8A8
  // rate there (benchmarks/RESULTS.md). Its W8A8 form (x quantized first, m16n8k32 E4M3 MMAs) was
  // slower in the step and is not kept.
  if (c.w->scale_grid().cols == 1 && FewRowsTakes(c, ctx, cut.fp8_few_rows_max))
    return {LinearKernel::kFp8GemmFewRows, 0};
  // Then up to 32 or 64 rows (RowCutovers), x quantized per token or tensor: the warpgroup GEMM
  // (W8A8), faster than both in the 8B step at 9-32 rows (benchmarks/RESULTS.md).
  if (c.m <= cut.fp8_wgmma_max && Fp8WgmmaTakes(c, ctx)) return {LinearKernel::kFp8Wgmma, 0};
  const std::optional<CublasFp8Modes> modes = CublasModesFor(*c.w, c.k);
  if (modes && c.out.dtype() == c.act && ctx.fp8_workspace != nullptr &&
      !fp8_cublas_refused_.count(Fp8RefusalKey(c)))
    return {LinearKernel::kFp8CublasLt, 0};
  return Fp8WithoutCublas(c, ctx);
}

// Where cuBLASLt takes no W8A8 form of the call (or refused it): the warpgroup GEMM where it takes
// the rows, so that the call still computes W8A8 as the checkpoint declares (the dequantizing GEMM
// keeps x in 16 bits: W8A16, closer to float32 than the emulation the GPU is held to; measured on
// the per-tensor fixture, RESULTS.md twenty-sixth session), else the dequantizing GEMM.
LinearKernelChoice LinearKernels::Fp8WithoutCublas(const LinearCall& c, const LinearContext& ctx) const {
  if (Fp8WgmmaTakes(c, ctx)) return {LinearKernel::kFp8Wgmma, 0};
  return {LinearKernel::kFp8Dequant, 0};
}

LinearKernelChoice LinearKernels::AfterFp8Refusal(const LinearCall& c, const LinearContext& ctx,
                                                  const absl::Status& why) {
  const LinearKernelChoice fallback = Fp8WithoutCublas(c, ctx);
  if (fp8_cublas_refused_.insert(Fp8RefusalKey(c)).second && LogLinearChoice())
    std::fprintf(stderr, "FP8 linear %lld x %lld x %lld: cuBLASLt refused (%s); the %s takes it\n",
                 static_cast<long long>(c.m), static_cast<long long>(c.n), static_cast<long long>(c.k),
                 std::string(why.message()).c_str(), std::string(fallback.Name()).c_str());
  return fallback;
}

// Int4 weights, by measurement (benchmarks/RESULTS.md, 4-bit weights: CUDA kernels): regular
// groups from 33 rows to 448 take the warpgroup GEMM (tensor bound there); up to
// kGemvW4A16MmaMaxRows rows the tensor-core GEMV (the decode batches: bound by streaming the
// codes; x in fragment order from 9 rows, in the workspace); the few-rows GEMM only where
// gemm_few_rows_int4_min_rows asks for it; past those (prefill, irregular groups) slices of the weight
// widened to 16 bits and cuBLASLt's GEMM on them, or the 4-bit mma.sync GEMM where the workspace holds no
// slice. The widened path rounds each weight to the activation type once; the others keep (code - zero) exact
// and scale float32 sums. gemv_max_rows = 0 turns the GEMV off.
LinearKernelChoice LinearKernels::ChooseW4A16(const LinearCall& c, const LinearContext& ctx) const {
  const CudaBackendOptions& o = options_;
  const int64_t kp = c.w->int4_storage_columns();
  if (c.m >= o.gemm_w4a16_wgmma_min_rows && c.m <= o.gemm_w4a16_wgmma_max_rows &&
      ctx.few_rows_workspace_bytes >= cuda::GemmW4A16WgmmaWorkspaceBytes(ctx.num_sms) &&
      cuda::GemmW4A16WgmmaSupports(c.act, c.out.dtype(), W4Weights(*c.w), c.m, c.n, kp, c.x.data(),
                                   c.out.data()))
    return {LinearKernel::kW4A16Wgmma, 0};
  if (c.m >= o.gemm_few_rows_int4_min_rows && FewRowsTakes(c, ctx, o.gemm_few_rows_int4_max_rows))
    return {LinearKernel::kW4A16GemmFewRows, 0};
  if (o.gemv_max_rows > 0 && c.m <= cuda::kGemvW4A16MmaMaxRows && kp / 32 * 4 <= (32 << 10))
    return {LinearKernel::kW4A16MmaGemv, 0};
  if (PlanW4Dequant(c, ctx).slice_rows >= std::min(c.n, kW4MinSliceRows)) return {LinearKernel::kW4A16DequantGemm, 0};
  return {LinearKernel::kW4A16Gemm, 0};
}

// Slices of widened weight rows, each followed by cuBLASLt's GEMM into its columns of out; an
// act-order input is permuted into the workspace's front a chunk of rows at a time first.
absl::Status LinearKernels::RunW4A16Dequant(const LinearCall& c, const LinearContext& ctx) {
  const cuda::W4A16Weights w = W4Weights(*c.w);
  const int64_t kp = c.w->int4_storage_columns();
  const W4DequantPlan p = PlanW4Dequant(c, ctx);
  if (p.slice_rows < 1 || p.x_rows < 1) return absl::InternalError("Linear: no workspace for the int4 dequant GEMM");
  const size_t in_bytes = DTypeSize(c.act), out_bytes = DTypeSize(c.out.dtype());
  const char* bias = static_cast<const char*>(BiasOf(c));
  const bool bias_in_gemm = bias != nullptr && c.out.dtype() == c.act;  // as RunCublas
  char* ws = static_cast<char*>(ctx.fp8_workspace);
  void* slice = ws + p.x_bytes;
  for (int64_t m0 = 0; m0 < c.m; m0 += p.x_rows) {
    const int64_t mc = std::min(p.x_rows, c.m - m0);
    const void* x = static_cast<const char*>(c.x.data()) + m0 * c.k * in_bytes;
    if (!c.w->input_perm.empty()) {
      RETURN_IF_ERROR(cuda::LaunchW4A16PermuteColumns(c.act, x, c.w->input_perm.data_as<const int32_t>(), ws, mc, c.k,
                                                      kp, ctx.stream, options_.programmatic_launch));
      x = ws;
    }
    char* out = static_cast<char*>(c.out.data()) + m0 * c.n * out_bytes;
    for (int64_t r0 = 0; r0 < c.n; r0 += p.slice_rows) {
      const int64_t rows = std::min(p.slice_rows, c.n - r0);
      RETURN_IF_ERROR(cuda::LaunchW4A16Dequantize(c.act, w, c.n, r0, rows, kp, slice, ctx.stream));
      RETURN_IF_ERROR(ctx.gemm->Run(c.act, c.out.dtype(), x, slice, bias_in_gemm ? bias + r0 * in_bytes : nullptr,
                                    out + r0 * out_bytes, mc, rows, kp, ctx.stream, c.n));
    }
  }
  if (bias != nullptr && !bias_in_gemm)
    return cuda::LaunchAddBias(c.act, c.out.dtype(), c.out.data(), bias, c.m, c.n, ctx.stream);
  return absl::OkStatus();
}

// An act-order weight's input goes through the workspace in storage-column order, a chunk of rows
// at a time, each chunk followed by its kernel.
absl::Status LinearKernels::RunW4A16(const LinearCall& c, LinearKernelChoice choice, const LinearContext& ctx) {
  const cuda::W4A16Weights w = W4Weights(*c.w);
  const int64_t kp = c.w->int4_storage_columns();
  const size_t in_bytes = DTypeSize(c.act), out_bytes = DTypeSize(c.out.dtype());
  const char* bias = static_cast<const char*>(BiasOf(c));
  if (choice.kernel == LinearKernel::kW4A16DequantGemm) return RunW4A16Dequant(c, ctx);
  const int64_t out_cols = c.glu_cols > 0 ? c.glu_cols : c.n;
  // x_ws: workspace the GEMV may use (after an act-order input's permuted rows).
  auto run = [&](const void* x, int64_t r0, int64_t rows, void* x_ws, size_t x_ws_bytes) -> absl::Status {
    void* out = static_cast<char*>(c.out.data()) + r0 * out_cols * out_bytes;
    if (choice.kernel == LinearKernel::kW4A16GemmFewRows)
      return RunGemmFewRows(c, options_, ctx, x, out, rows);
    if (choice.kernel == LinearKernel::kW4A16Wgmma) {
      cuda::GemmW4A16WgmmaOptions wo;
      wo.pdl = options_.programmatic_launch;
      return cuda::LaunchGemmW4A16Wgmma(c.act, x, w, bias, out, rows, c.n, kp, ctx.num_sms, ctx.few_rows_workspace,
                                        ctx.few_rows_workspace_bytes, wo, ctx.stream);
    }
    if (choice.kernel == LinearKernel::kW4A16MmaGemv) {
      cuda::GemvW4A16MmaOptions mo;
      mo.pdl = options_.programmatic_launch;
      mo.glu_cols = c.glu_cols;
      mo.norm = c.norm;
      mo.add_to_out = c.add_to_out;
      mo.rope = c.rope;
      mo.x_workspace = x_ws;
      mo.x_workspace_bytes = x_ws_bytes;
      return cuda::LaunchGemvW4A16Mma(c.act, c.out.dtype(), x, w, bias, out, rows, c.n, kp, ctx.num_sms, mo,
                                      ctx.stream);
    }
    return cuda::LaunchGemmW4A16(c.act, c.out.dtype(), x, w, bias, out, rows, c.n, kp, ctx.num_sms, ctx.stream);
  };
  if (c.w->input_perm.empty()) return run(c.x.data(), 0, c.m, ctx.fp8_workspace, ctx.fp8_workspace_bytes);
  const int64_t rows = std::min<int64_t>(c.m, static_cast<int64_t>(ctx.fp8_workspace_bytes) / (kp * in_bytes));
  if (ctx.fp8_workspace == nullptr || rows < 1)
    return absl::ResourceExhaustedError(absl::StrCat("Linear: an act-order int4 weight of ", kp,
                                                     " storage columns needs a larger fp8_workspace_bytes"));
  for (int64_t r0 = 0; r0 < c.m; r0 += rows) {
    const int64_t mc = std::min(rows, c.m - r0);
    RETURN_IF_ERROR(cuda::LaunchW4A16PermuteColumns(c.act, static_cast<const char*>(c.x.data()) + r0 * c.k * in_bytes,
                                                    c.w->input_perm.data_as<const int32_t>(), ctx.fp8_workspace, mc,
                                                    c.k, kp, ctx.stream, options_.programmatic_launch));
    const size_t used = (static_cast<size_t>(mc * kp * in_bytes) + 255) / 256 * 256;
    const size_t left = ctx.fp8_workspace_bytes > used ? ctx.fp8_workspace_bytes - used : 0;
    RETURN_IF_ERROR(run(ctx.fp8_workspace, r0, mc, static_cast<char*>(ctx.fp8_workspace) + used, left));
  }
  return absl::OkStatus();
}

bool LinearKernels::TakesFp8Input(const LinearCall& c, const LinearContext& ctx) {
  if (c.w->format.element != DType::kF8E4M3 || c.k % 16 != 0) return false;
  const std::optional<CublasFp8Modes> modes = CublasModesFor(*c.w, c.k);
  if (!modes || modes->quantize == cuda::Fp8ActivationScaling::kPerGroup) return false;
  const LinearKernel kernel = ChooseFp8(c, ctx).kernel;
  if (kernel == LinearKernel::kFp8Wgmma || kernel == LinearKernel::kFp8W8A8Gemv) return true;
  if (kernel != LinearKernel::kFp8CublasLt) return false;
  // One GEMM over every row of the quantized input (RunFp8W8A8): planned now, as Choose would.
  const absl::Status probe = ProbeFp8Cublas(c, ctx, /*whole=*/true);
  if (absl::IsUnimplemented(probe)) return AfterFp8Refusal(c, ctx, probe).kernel == LinearKernel::kFp8Wgmma;
  return probe.ok();
}

// Where cuBLASLt's raw float32 sums of a chunk go (CudaBackendOptions::fp8_split_scales), null
// where that form does not apply: per-tensor or per-channel x per-token or static scales, narrow
// weights, decode-sized chunks, and room in the FP8 workspace after `chunk` (its quantized rows and
// their per-token scales: Fp8ChunkAt) or all of it (`chunk` null: x came quantized from elsewhere).
constexpr int64_t kFp8SplitScalesMaxCols = 8192;
constexpr int64_t kFp8SplitScalesMaxRows = 256;
float* Fp8SumsSlot(const LinearCall& c, const LinearContext& ctx, const cuda::Fp8GemmArgs& a,
                   const Fp8Chunk* chunk, int64_t rows) {
  if (ctx.unit_scale == nullptr || ctx.fp8_workspace == nullptr || !cuda::ScaleModeIsTensorOrRow(a.x_mode) ||
      !cuda::ScaleModeIsTensorOrRow(a.w_mode) || c.n % 4 != 0 || c.n > kFp8SplitScalesMaxCols ||
      a.m > kFp8SplitScalesMaxRows)
    return nullptr;
  char* const base = static_cast<char*>(ctx.fp8_workspace);
  const int64_t used =
      chunk == nullptr ? 0 : reinterpret_cast<char*>(chunk->scales) - base + (rows * 4 + 255) / 256 * 256;
  if (used + a.m * c.n * 4 > static_cast<int64_t>(ctx.fp8_workspace_bytes)) return nullptr;
  return reinterpret_cast<float*>(base + used);
}

// The scales of GEMM `a` still to apply to its raw sums `sums` (Fp8PendingScales).
cuda::Fp8PendingScales PendingScalesOf(const cuda::Fp8GemmArgs& a, const float* sums) {
  return {sums,
          a.x_scale,
          a.x_mode == cuda::Fp8ScaleMode::kOuterVector,
          a.w_scale,
          a.w_mode == cuda::Fp8ScaleMode::kOuterVector,
          a.bias};
}

bool LinearKernels::EndTakesPendingScales(const LinearCall& c, const LinearContext& ctx) const {
  if (!options_.fp8_split_scales || !options_.fp8_pending_scales || c.out.dtype() != c.act ||
      fp8_raw_sums_refused_.count(Fp8RefusalKey(c)))
    return false;
  const std::optional<CublasFp8Modes> modes = CublasModesFor(*c.w, c.k);
  if (!modes) return false;
  const bool given = c.quantized != nullptr;
  if (!given && Fp8ChunkRows(c, *modes, ctx) < c.m) return false;  // the end reads every row's sums at once
  const Fp8Chunk chunk =
      given ? Fp8Chunk{c.quantized->values.data_as<char>(), c.quantized->scales.data_as<float>()}
            : Fp8ChunkAt(c, ctx, c.m);
  const cuda::Fp8GemmArgs a = Fp8ArgsFor(c, ctx, *modes, chunk.q, chunk.scales, 0, c.m);
  float* const sums = Fp8SumsSlot(c, ctx, a, given ? nullptr : &chunk, c.m);
  if (sums == nullptr) return false;
  const cuda::Fp8PendingScales pending = PendingScalesOf(a, sums);
  if (c.rope != nullptr) {
    cuda::QkvRopeParams p = *c.rope;
    p.pending = pending;
    return c.rope->num_tokens == c.m && cuda::QkvRopeTakesPendingScales(p);
  }
  const AddRmsNormEnd& e = *c.add_norm;
  const int64_t per_vec = 16 / static_cast<int64_t>(DTypeSize(c.act));  // values a 16-byte chunk
  return c.n % per_vec == 0 && cuda::RmsNormHeldChunks(c.n / per_vec) > 0 &&
         e.residual.numel() == c.m * c.n && e.normed.numel() == c.m * c.n && e.weight.numel() == c.n &&
         cuda::RmsNormTakesPendingDelta(pending);
}

// The end of a call with LinearCall::rope or add_norm (QkvRope, or the residual add and RMSNorm):
// reading `out` where the GEMM's kernel did not take it, or with `pending`, the GEMM's raw sums of
// every row with their scales still to apply.
absl::Status RunEnd(const LinearCall& c, const LinearContext& ctx, bool pdl,
                    const cuda::Fp8PendingScales* pending = nullptr) {
  if (c.rope != nullptr) {
    cuda::QkvRopeParams p = *c.rope;
    if (pending != nullptr) p.pending = *pending;
    return cuda::LaunchQkvRope(c.act, p, ctx.stream, pdl);
  }
  const AddRmsNormEnd& e = *c.add_norm;
  return cuda::LaunchRmsNorm(c.act, nullptr, e.residual.data(), pending != nullptr ? nullptr : c.out.data(),
                             e.weight.data(), e.normed.data(), c.m, c.n, e.eps, ctx.stream, pdl, e.quantized,
                             pending);
}

// Quantizes x a chunk of rows at a time into the FP8 workspace (E4M3 rows, then their scales),
// each chunk followed by its GEMM: the warpgroup GEMM's, or cuBLASLt's; x quantized already
// (LinearCall::quantized): one GEMM over every row. If cuBLASLt has no algorithm for the
// combination, the shape is remembered and this call (and later ones) take the dequantizing GEMM.
absl::Status LinearKernels::RunFp8W8A8(const LinearCall& c, LinearKernelChoice choice, const LinearContext& ctx) {
  // With c.rope or c.add_norm, Run has checked Fuses: cuBLASLt, raw sums in one chunk
  // (EndTakesPendingScales); a refusal met here runs the end apart (RunEnd reading `out`).
  const bool pdl = options_.programmatic_launch;
  const std::optional<CublasFp8Modes> modes = CublasModesFor(*c.w, c.k);
  if (!modes) return RunFp8Dequant(c, ctx);
  const bool given = c.quantized != nullptr;
  const int64_t rows = given ? c.m : std::min<int64_t>(c.m, Fp8ChunkRows(c, *modes, ctx));
  if (rows < 1) return RunFp8Dequant(c, ctx);
  const Fp8Chunk chunk = given ? Fp8Chunk{c.quantized->values.data_as<char>(), c.quantized->scales.data_as<float>()}
                               : Fp8ChunkAt(c, ctx, rows);
  const float* static_scale =
      modes->quantize == cuda::Fp8ActivationScaling::kStatic ? c.w->input_scale.data_as<const float>() : nullptr;
  const size_t in_bytes = DTypeSize(c.act);
  bool end_done = false;  // c.rope / c.add_norm run by the kernel that applies the scales
  for (int64_t r0 = 0; r0 < c.m; r0 += rows) {
    const int64_t mc = std::min(rows, c.m - r0);
    if (!given)
      RETURN_IF_ERROR(cuda::LaunchQuantizeFp8(c.act, static_cast<const char*>(c.x.data()) + r0 * c.k * in_bytes,
                                              chunk.q, chunk.scales, mc, c.k, modes->quantize, static_scale,
                                              ctx.stream, options_.programmatic_launch));
    const cuda::Fp8GemmArgs a = Fp8ArgsFor(c, ctx, *modes, chunk.q, chunk.scales, r0, mc);
    if (choice.kernel == LinearKernel::kFp8W8A8Gemv) {
      cuda::GemvFp8W8A8Options go;
      go.pdl = options_.programmatic_launch;
      go.num_sms = ctx.num_sms;
      RETURN_IF_ERROR(cuda::LaunchGemvFp8W8A8(a, go, ctx.stream));
      continue;
    }
    if (choice.kernel == LinearKernel::kFp8Wgmma) {
      cuda::GemmFp8WgmmaOptions wo;
      wo.pdl = options_.programmatic_launch;
      RETURN_IF_ERROR(cuda::LaunchGemmFp8Wgmma(a, ctx.num_sms, ctx.few_rows_workspace, ctx.few_rows_workspace_bytes,
                                               wo, ctx.stream));
      continue;
    }
    float* const sums = options_.fp8_split_scales && !fp8_raw_sums_refused_.count(Fp8RefusalKey(c))
                            ? Fp8SumsSlot(c, ctx, a, given ? nullptr : &chunk, rows)
                            : nullptr;
    if (sums != nullptr) {
      cuda::Fp8GemmArgs raw = a;
      raw.x_scale = raw.w_scale = ctx.unit_scale;
      raw.x_mode = raw.w_mode = cuda::Fp8ScaleMode::kScalar;
      raw.bias = nullptr;
      raw.out = sums;
      raw.out_dtype = DType::kF32;
      const absl::Status raw_st = ctx.gemm->RunFp8(raw, ctx.stream);
      if (raw_st.ok()) {
        if (c.rope != nullptr || c.add_norm != nullptr) {  // one chunk (EndTakesPendingScales)
          const cuda::Fp8PendingScales pending = PendingScalesOf(a, sums);
          RETURN_IF_ERROR(RunEnd(c, ctx, pdl, &pending));
          end_done = true;
          continue;
        }
        RETURN_IF_ERROR(cuda::LaunchApplyFp8GemmScales(
            a.out_dtype, sums, mc, c.n, a.x_scale, a.x_mode == cuda::Fp8ScaleMode::kOuterVector, a.w_scale,
            a.w_mode == cuda::Fp8ScaleMode::kOuterVector, a.bias, a.out, ctx.stream,
            options_.programmatic_launch));
        continue;
      }
      if (!absl::IsUnimplemented(raw_st)) return raw_st;
      fp8_raw_sums_refused_.insert(
          Fp8RefusalKey(c));  // refused: the per-token x per-channel form, now and later
    }
    const absl::Status st = ctx.gemm->RunFp8(a, ctx.stream);
    if (absl::IsUnimplemented(st) && given)  // planned by TakesFp8Input: x itself may be unwritten
      return absl::InternalError(absl::StrCat("Linear: cuBLASLt refused an FP8 GEMM it had planned (",
                                              c.m, " x ", c.n, " x ", c.k, "): ", st.message()));
    if (absl::IsUnimplemented(st)) {
      // Choose probed the first chunk; a shorter last one can still be refused: the whole call
      // then takes what runs without cuBLASLt (it rewrites every row, so the output stays one kernel's).
      const LinearKernelChoice fallback = AfterFp8Refusal(c, ctx, st);
      LinearCall plain = c;
      plain.rope = nullptr;
      plain.add_norm = nullptr;
      RETURN_IF_ERROR(fallback.kernel == LinearKernel::kFp8Wgmma ? RunFp8W8A8(plain, fallback, ctx)
                                                                 : RunFp8Dequant(plain, ctx));
      return c.rope != nullptr || c.add_norm != nullptr ? RunEnd(c, ctx, pdl) : absl::OkStatus();
    }
    RETURN_IF_ERROR(st);
  }
  if ((c.rope != nullptr || c.add_norm != nullptr) && !end_done) return RunEnd(c, ctx, pdl);
  return absl::OkStatus();
}

absl::StatusOr<LinearKernelChoice> LinearKernels::Choose(const LinearCall& c, const LinearContext& ctx) {
  if (c.w->format.element == DType::kF8E4M3) {
    const LinearKernelChoice choice = ChooseFp8(c, ctx);
    if (choice.kernel != LinearKernel::kFp8CublasLt) return choice;
    // cuBLASLt's FP8 rules (shapes, scale modes) vary between versions: ask it now, so that a
    // refusal takes what runs without cuBLASLt from the start (and the op is labelled by what runs).
    const absl::Status probe = ProbeFp8Cublas(c, ctx, c.quantized != nullptr);
    if (absl::IsUnimplemented(probe)) return AfterFp8Refusal(c, ctx, probe);
    RETURN_IF_ERROR(probe);
    return choice;
  }
  if (c.w->format.int4()) return ChooseW4A16(c, ctx);
  const CudaBackendOptions& o = options_;
  LinearKernelChoice choice{LinearKernel::kCublasLt, 0};
  if (c.m <= o.gemv_max_rows && c.m <= cuda::kGemvMaxRows) {
    const int wpr = o.gemv_warps_per_row;
    if (!o.autotune_linear && wpr != 0) {  // a form forced (tests, benchmarks)
      choice = wpr > 0 ? LinearKernelChoice{LinearKernel::kGemv, wpr} : LinearKernelChoice{LinearKernel::kGemvRing, 0};
    } else if (o.gemv_smem_ring && c.m <= o.gemv_ring_max_rows &&
               cuda::GemvRingFits(c.act, c.m, c.n, c.k, o.gemv_ring_bytes, ctx.num_sms)) {
      // Not timed: an isolated timing cannot see what makes the ring form win in a step, its
      // weights streaming during the kernels before it (see CudaBackendOptions::gemv_smem_ring).
      choice = {LinearKernel::kGemvRing, 0};
    } else if (!o.autotune_linear) {
      choice = {LinearKernel::kGemv, 0};
    } else {
      const ShapeKey key{c.m, c.n, c.k, c.out.dtype(), BiasOf(c) != nullptr};
      auto it = timed_.find(key);
      if (it != timed_.end()) {
        choice = it->second;
      } else if (ctx.capturing || ctx.timing) {
        // Not timed yet, and nothing can be timed while capturing a graph (the eager run before
        // every capture normally decided already): the GEMV's own choice.
        choice = {LinearKernel::kGemv, 0};
      } else {
        ASSIGN_OR_RETURN(choice, TimeGemvAgainstCublas(c, ctx));
        timed_.emplace(key, choice);
      }
    }
  }
  if (choice.kernel == LinearKernel::kCublasLt && c.m > o.gemv_max_rows &&
      FewRowsTakes(c, ctx, o.gemm_few_rows_16bit_max_rows))
    return LinearKernelChoice{LinearKernel::kGemmFewRows, 0};
  if (choice.kernel == LinearKernel::kCublasLt && ctx.tuning_pass && c.m <= o.tune_cublas_max_rows &&
      !ctx.capturing && !ctx.timing &&
      cublas_tuned_.insert(ShapeKey{c.m, c.n, c.k, c.out.dtype(), BiasOf(c) != nullptr}).second) {
    RETURN_IF_ERROR(TuneCublas(c, ctx));
  }
  return choice;
}

bool LinearKernels::TakesGlu(const LinearCall& c, LinearKernelChoice choice, const LinearContext& ctx) const {
  if (c.n % 8 != 0 || c.out.dtype() != c.act || c.quantized != nullptr) return false;
  // The gate/up forms of the register GEMVs take one warp a row.
  const auto one_warp_a_row = [&](int auto_wpr) {
    return choice.warps_per_row == 1 || (choice.warps_per_row == 0 && auto_wpr == 1);
  };
  switch (choice.kernel) {
    case LinearKernel::kGemv:
      return one_warp_a_row(cuda::GemvAutoWarpsPerRow(c.act, c.n, c.k, ctx.num_sms)) &&
             c.k % (16 / static_cast<int64_t>(DTypeSize(c.act))) == 0 &&
             reinterpret_cast<uintptr_t>(c.x.data()) % 16 == 0 && reinterpret_cast<uintptr_t>(c.w->weight.data()) % 16 == 0;
    case LinearKernel::kFp8Gemv: return one_warp_a_row(cuda::GemvFp8AutoWarpsPerRow(c.n, c.k, ctx.num_sms));
    case LinearKernel::kW4A16MmaGemv:
      return cuda::GemvW4A16MmaGluSameSums(c.m, c.n, c.w->int4_storage_columns(), ctx.num_sms);
    default: return false;
  }
}

bool LinearKernels::Fuses(const LinearCall& c, LinearKernelChoice choice, bool norm, bool add,
                          const LinearContext& ctx) const {
  if (c.add_norm != nullptr || (c.rope != nullptr && choice.kernel == LinearKernel::kFp8CublasLt)) {
    return choice.kernel == LinearKernel::kFp8CublasLt && !norm && !add && c.glu_cols == 0 &&
           (c.rope == nullptr) != (c.add_norm == nullptr) && EndTakesPendingScales(c, ctx);
  }
  if (c.rope != nullptr) {  // the FP8 register GEMV one warp a row, the int4 one with its own K split
    if (add || c.glu_cols > 0 || c.quantized != nullptr || c.out.dtype() != c.act || c.rope->num_tokens < c.m)
      return false;
    if (choice.kernel == LinearKernel::kFp8Gemv)
      return (choice.warps_per_row == 1 ||
              (choice.warps_per_row == 0 && cuda::GemvFp8AutoWarpsPerRow(c.n, c.k, ctx.num_sms) == 1)) &&
             cuda::GemvRopeTakes(c.n, *c.rope) &&
             (!norm || cuda::GemvNormTakes(c.m, c.k, static_cast<int64_t>(DTypeSize(c.act))));
    if (choice.kernel == LinearKernel::kW4A16MmaGemv)
      return c.w->input_perm.empty() && c.w->int4_storage_columns() == c.k &&
             cuda::GemvW4A16MmaRopeSameSums(c.m, c.n, c.k, ctx.num_sms, *c.rope) &&
             (!norm || cuda::GemvW4A16MmaFuses(c.m, c.n, c.k, true, 0, ctx.num_sms, ctx.fp8_workspace_bytes));
    return false;
  }
  if (!norm && !add) return true;
  const bool same_out = c.out.dtype() == c.act;
  if (c.quantized != nullptr || (add && c.glu_cols > 0) || c.m < 1) return false;
  const int64_t elem = static_cast<int64_t>(DTypeSize(c.act));
  switch (choice.kernel) {
    case LinearKernel::kFp8Gemv: {
      // The norm where the grid is one wave (8 blocks an SM): each wave of blocks would pay the
      // norm's latency again (the 8B gate/up's 3,584 blocks: 46 us against 35 + 2.6 apart).
      const int wpr = choice.warps_per_row > 0 ? choice.warps_per_row : cuda::GemvFp8AutoWarpsPerRow(c.n, c.k, ctx.num_sms);
      const int64_t blocks = c.glu_cols > 0 ? c.glu_cols / 4 : (c.n + 8 / wpr - 1) / (8 / wpr);
      return same_out && (!norm || (cuda::GemvNormTakes(c.m, c.k, elem) && blocks <= 8 * int64_t{ctx.num_sms}));
    }
    case LinearKernel::kW4A16MmaGemv:  // x read in input order: no act-order permutation
      return same_out && c.w->input_perm.empty() && c.w->int4_storage_columns() == c.k &&
             (c.m <= 8 || options_.fuse_reordered_norm) &&
             cuda::GemvW4A16MmaFuses(c.m, c.n, c.k, norm, c.glu_cols, ctx.num_sms, ctx.fp8_workspace_bytes);
    default: return false;
  }
}

bool LinearKernels::FusesChosen(const LinearCall& c, bool norm, bool add, const LinearContext& ctx) const {
  if (c.w->format.element == DType::kF8E4M3) return Fuses(c, ChooseFp8(c, ctx), norm, add, ctx);
  if (c.w->format.int4()) return Fuses(c, ChooseW4A16(c, ctx), norm, add, ctx);
  return false;  // the 16-bit GEMVs fuse nothing
}

absl::Status LinearKernels::Run(const LinearCall& c, LinearKernelChoice choice, const LinearContext& ctx) {
  if (c.glu_cols > 0 && !TakesGlu(c, choice, ctx))
    return absl::InternalError(absl::StrCat("Linear: the ", std::string(choice.Name()), " kernel has no gate/up form"));
  if ((c.norm.active() || c.add_to_out || c.rope != nullptr || c.add_norm != nullptr) &&
      !Fuses(c, choice, c.norm.active(), c.add_to_out, ctx))
    return absl::InternalError(
        absl::StrCat("Linear: the ", std::string(choice.Name()), " kernel fuses no norm or residual add here"));
  switch (choice.kernel) {
    case LinearKernel::kCublasLt: return RunCublas(c, ctx);
    case LinearKernel::kGemv:
    case LinearKernel::kGemvRing: return RunGemv(c, choice, options_, ctx);
    case LinearKernel::kGemmFewRows:
    case LinearKernel::kFp8GemmFewRows: return RunGemmFewRows(c, options_, ctx);
    case LinearKernel::kFp8Gemv:
    case LinearKernel::kFp8GemvRing:
    case LinearKernel::kFp8GemvMma: return RunFp8Gemv(c, choice, options_, ctx);
    case LinearKernel::kFp8CublasLt:
    case LinearKernel::kFp8Wgmma:
    case LinearKernel::kFp8W8A8Gemv:
      return RunFp8W8A8(c, choice, ctx);
    case LinearKernel::kFp8Dequant: return RunFp8Dequant(c, ctx);
    case LinearKernel::kW4A16MmaGemv:
    case LinearKernel::kW4A16DequantGemm:
    case LinearKernel::kW4A16Gemm:
    case LinearKernel::kW4A16GemmFewRows:
    case LinearKernel::kW4A16Wgmma: return RunW4A16(c, choice, ctx);
  }
  return absl::InternalError("Linear: unknown kernel");
}

absl::Status LinearKernels::TuneCublas(const LinearCall& c, const LinearContext& ctx) {
  cuda::L2Flush flush(ctx.stream, ctx.l2_bytes);
  if (!flush.ok()) return absl::OkStatus();  // no room beside the arena: keep the heuristic's pick
  // The same form as RunCublas: the bias goes into cuBLASLt only in the output's type.
  const void* bias = BiasOf(c) && c.out.dtype() == c.act ? BiasOf(c) : nullptr;
  ASSIGN_OR_RETURN(const std::vector<float> us,
                   ctx.gemm->Tune(c.act, c.out.dtype(), c.x.data(), c.w->weight.data(), bias, c.out.data(), c.m, c.n,
                                  c.k, ctx.stream, options_.tune_cublas_candidates, [&] { return flush.Flush(); }));
  if (LogLinearChoice()) {
    std::string line = absl::StrCat("cuBLASLt ", c.n, " x ", c.k, ", ", c.m, " rows, heuristic picks (us):");
    for (float t : us) absl::StrAppend(&line, " ", std::isinf(t) ? std::string("-") : absl::StrFormat("%.1f", t));
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  return absl::OkStatus();
}

// Times the candidates on the call's own operands: the GEMV with 1, 2, 4 and 8 warps per output
// row (which balances the SMs best depends on N, K and the GPU: on an H100 the 8B gate/up
// projection takes 84 us with one warp a row and 80 with two) and cuBLASLt. A few warm-up runs,
// then the median of interleaved timed runs, each after writing a buffer larger than L2 so that
// the weights come from DRAM as they do in a real step, where every layer has its own. Each timed
// run is an RMSNorm over x (into scratch) followed by the candidate, as in a decode step where a
// linear follows a small kernel: the GEMV, launched with PDL, streams its first weights during its
// predecessor's tail, and an isolated timing would not see that. Synchronizes the stream: first
// call of a shape only.
absl::StatusOr<LinearKernelChoice> LinearKernels::TimeGemvAgainstCublas(const LinearCall& c,
                                                                        const LinearContext& ctx) {
  cuda::L2Flush flush(ctx.stream, ctx.l2_bytes, c.x.bytes());  // scratch: the norm's output
  if (!flush.ok()) return LinearKernelChoice{LinearKernel::kGemv, 0};  // no room beside the arena: the GEMV's own rule
  constexpr int kWarpsPerRow[] = {1, 2, 4, 8};
  constexpr int kCandidates = 5;  // the four GEMV forms, then cuBLASLt
  cuda::CandidateTiming timing;
  timing.warmup = 3;  // module load, cuBLASLt heuristics
  timing.timed = 10;
  ASSIGN_OR_RETURN(const std::vector<float> us,
                   cuda::TimeCandidates(ctx.stream, kCandidates, timing, [&] { return flush.Flush(); },
                                        [&](int cand) -> absl::Status {
                                          // x's first row stands in for the norm weight: only
                                          // the timing matters.
                                          RETURN_IF_ERROR(cuda::LaunchRmsNorm(
                                              c.act, c.x.data(), nullptr, nullptr, c.x.data(), flush.scratch(), c.m,
                                              c.k, 1e-5f, ctx.stream, options_.programmatic_launch));
                                          if (cand == 4) return RunCublas(c, ctx);
                                          return RunGemv(c, {LinearKernel::kGemv, kWarpsPerRow[cand]}, options_, ctx);
                                        }));
  // A challenger must win clearly: on a near tie the choice would flip between processes and
  // ranks from timing noise, and bf16 outputs (rounded differently by each kernel) with it. The
  // GEMV's own rule is the incumbent among its forms; cuBLASLt must then lose clearly to it.
  constexpr float kMargin = 0.97f;
  const int auto_wpr = cuda::GemvAutoWarpsPerRow(c.act, c.n, c.k, ctx.num_sms);
  int best = 0;
  while (kWarpsPerRow[best] != auto_wpr) ++best;
  for (int cand = 0; cand < 4; ++cand)
    if (us[cand] < kMargin * us[best]) best = cand;
  const LinearKernelChoice choice = us[best] < kMargin * us[4] ? LinearKernelChoice{LinearKernel::kGemv, kWarpsPerRow[best]}
                                                               : LinearKernelChoice{LinearKernel::kCublasLt, 0};
  // One line per timed shape on stderr, for comparing processes or ranks whose speed differs (a
  // near tie can fall either way).
  if (LogLinearChoice()) {
    std::fprintf(stderr,
                 "linear %lld x %lld, %lld rows: GEMV 1/2/4/8 warps a row %.1f/%.1f/%.1f/%.1f us, cuBLASLt %.1f us "
                 "(with a norm before each) -> %s\n",
                 static_cast<long long>(c.n), static_cast<long long>(c.k), static_cast<long long>(c.m), us[0], us[1],
                 us[2], us[3], us[4],
                 choice.kernel == LinearKernel::kGemv ? absl::StrCat("GEMV, ", choice.warps_per_row, " warps a row").c_str()
                                                      : "cuBLASLt");
  }
  return choice;
}

}  // namespace llm
