#include "kernels/cuda/gemm/cublaslt_gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/common/candidate_timing.h"
#include "kernels/cuda/common/cuda_status.h"

namespace llm::cuda {
namespace {

// Alignment of a device pointer, as cuBLASLt's MIN_ALIGNMENT preferences want it (<= 256).
uint32_t AlignmentOf(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && (a % align) != 0) align >>= 1;
  return align;
}

absl::StatusOr<cudaDataType_t> CudaType(DType t) {
  switch (t) {
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: return absl::InvalidArgumentError(absl::StrCat("Linear: unsupported dtype ", std::string(DTypeName(t))));
  }
}

// RAII for the cuBLASLt descriptors of one cached plan.
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's picks, best first
  bool has_bias = false;
  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
  }
};

constexpr int kMaxCandidates = 32;
constexpr int kFp8Tag = 1000;  // PlanKey's dtype slot for FP8 plans: kFp8Tag + scale modes
constexpr int kFp8FastAccumulation = 64;  // added to an FP8 plan's modes: fast accumulation

cublasLtMatmulMatrixScale_t CublasScaleMode(Fp8ScaleMode m) {
  switch (m) {
    case Fp8ScaleMode::kScalar: return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
    case Fp8ScaleMode::kOuterVector: return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case Fp8ScaleMode::kBlock128: return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    case Fp8ScaleMode::kVector128: return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

using PlanKey = std::tuple<int64_t, int64_t, int64_t, int, int, bool, uint32_t, uint32_t, uint32_t, uint32_t, int64_t>;

// An FP8 plan's modes: the scale modes, and fast accumulation where the scales allow it (they must
// not change along K).
int Fp8PlanModes(const Fp8GemmArgs& a) {
  const bool blocked = a.w_mode == Fp8ScaleMode::kBlock128 || a.x_mode == Fp8ScaleMode::kVector128;
  return static_cast<int>(a.x_mode) * 8 + static_cast<int>(a.w_mode) +
         (a.fast_accumulation && !blocked ? kFp8FastAccumulation : 0);
}

}  // namespace

struct CublasLtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<PlanKey, std::unique_ptr<Plan>> plans;

  ~Impl() {
    plans.clear();
    if (handle) cublasLtDestroy(handle);
  }

  absl::Status Matmul(Plan& plan, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w, const void* bias,
                      void* out, Stream stream) {
    if (bias)
      CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    const float alpha = 1.0f, beta = 0.0f;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(handle, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, out, plan.c, out,
                                          plan.c, &algo, workspace, workspace_bytes,
                                          reinterpret_cast<cudaStream_t>(stream)));
    return absl::OkStatus();
  }

  // FP8 plans: the scale modes are part of the key (as x_mode * 8 + w_mode, plus
  // kFp8FastAccumulation, in the dtype slot's place beside kFp8Tag).
  absl::StatusOr<Plan*> GetPlan(DType dtype, DType out_dtype, const void* x, const void* w, const void* bias,
                                void* out, int64_t m, int64_t n, int64_t k, int fp8_modes = -1, int64_t ldc = 0) {
    if (ldc <= 0) ldc = n;
    const PlanKey key{m, n, k, fp8_modes >= 0 ? kFp8Tag + fp8_modes : static_cast<int>(dtype),
                      static_cast<int>(out_dtype), bias != nullptr, AlignmentOf(w), AlignmentOf(x), AlignmentOf(out),
                      bias ? AlignmentOf(bias) : 256u, ldc};
    auto it = plans.find(key);
    if (it != plans.end()) return it->second.get();
    const bool fp8 = fp8_modes >= 0;
    cudaDataType_t in_t = CUDA_R_8F_E4M3;
    if (!fp8) {
      ASSIGN_OR_RETURN(in_t, CudaType(dtype));
    }
    ASSIGN_OR_RETURN(cudaDataType_t out_t, CudaType(out_dtype));
    const cudaDataType_t bias_t = fp8 ? out_t : in_t;  // FP8: the bias is in the output's type
    auto plan = std::make_unique<Plan>();
    // Row-major out[M,N] = x[M,K] W[N,K]^T is column-major outᵀ[N,M] = W(as K×N)ᵀ · xᵀ(as K×M).
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
    if (bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t, sizeof(bias_t)));
      CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
      plan->has_bias = true;
    }
    if (fp8) {
      // A is the weight, B the activations (see the layouts below): the modes go with them.
      const cublasLtMatmulMatrixScale_t a_mode = CublasScaleMode(static_cast<Fp8ScaleMode>(fp8_modes % 8));
      const cublasLtMatmulMatrixScale_t b_mode = CublasScaleMode(static_cast<Fp8ScaleMode>(fp8_modes / 8 % 8));
      if (fp8_modes & kFp8FastAccumulation) {
        const int8_t fast = 1;
        CUBLAS_RETURN_IF_ERROR(
            cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)));
      }
      CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof(a_mode)));
      CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof(b_mode)));
      // Placeholders for the heuristic; Matmul sets each call's pointers.
      const void* none = w;
      CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &none, sizeof(none)));
      CUBLAS_RETURN_IF_ERROR(
          cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &none, sizeof(none)));
    }
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->a, in_t, k, n, k));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->b, in_t, k, m, k));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&plan->c, out_t, n, m, ldc));

    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    struct PrefGuard {
      cublasLtMatmulPreference_t p;
      ~PrefGuard() { cublasLtMatmulPreferenceDestroy(p); }
    } guard{pref};
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                &workspace_bytes, sizeof(workspace_bytes)));
    const uint32_t align_a = std::get<6>(key), align_b = std::get<7>(key), align_c = std::get<8>(key);
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                                &align_a, sizeof(align_a)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                                &align_b, sizeof(align_b)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                                &align_c, sizeof(align_c)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                                &align_c, sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t results[kMaxCandidates] = {};
    int found = 0;
    const cublasStatus_t heuristic = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b, plan->c,
                                                                     plan->c, pref, kMaxCandidates, results, &found);
    // FP8 GEMMs have shape and scale-mode rules that vary between cuBLASLt versions (an H100 with
    // cuBLASLt 13.1 refuses e.g. N = 130, or 128x128 weight blocks at M = 2 with NOT_SUPPORTED
    // or INVALID_VALUE): such a refusal is "no algorithm", which the caller turns into its
    // dequantizing GEMM, not an error.
    if (fp8 && (heuristic == CUBLAS_STATUS_NOT_SUPPORTED || heuristic == CUBLAS_STATUS_INVALID_VALUE)) found = 0;
    else CUBLAS_RETURN_IF_ERROR(heuristic);
    if (found == 0)
      return absl::UnimplementedError(absl::StrCat("Linear: cuBLASLt has no algorithm for m ", m, " n ", n, " k ", k,
                                                   " ", fp8 ? std::string("float8_e4m3fn") : std::string(DTypeName(dtype)),
                                                   " -> ", std::string(DTypeName(out_dtype)), bias ? " with bias" : "",
                                                   fp8 ? absl::StrCat(" (FP8 scale modes ", fp8_modes, ")") : ""));
    plan->algo = results[0].algo;
    for (int i = 0; i < found; ++i) plan->candidates.push_back(results[i].algo);
    Plan* raw = plan.get();
    plans.emplace(key, std::move(plan));
    return raw;
  }
};

CublasLtGemm::CublasLtGemm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CublasLtGemm::~CublasLtGemm() = default;

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(void* workspace, size_t workspace_bytes) {
  auto impl = std::make_unique<Impl>();
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&impl->handle));
  impl->workspace = workspace;
  impl->workspace_bytes = workspace_bytes;
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(std::move(impl)));
}

size_t CublasLtGemm::cached_plans() const { return impl_->plans.size(); }

absl::Status CublasLtGemm::PlanFp8(const Fp8GemmArgs& a) {
  // float32 out: the raw sums of the scalar form (no bias), whose scale vectors a later kernel applies.
  const bool f32_sums = a.out_dtype == DType::kF32 && a.x_mode == Fp8ScaleMode::kScalar &&
                        a.w_mode == Fp8ScaleMode::kScalar && a.bias == nullptr;
  if (a.m < 1 || a.n <= 0 || a.k <= 0 || a.k % 16 != 0 || !a.x_scale || !a.w_scale ||
      (a.out_dtype != DType::kBF16 && a.out_dtype != DType::kF16 && !f32_sums))
    return absl::UnimplementedError(absl::StrCat("Linear: no FP8 GEMM for m ", a.m, " n ", a.n, " k ", a.k, " -> ",
                                                 std::string(DTypeName(a.out_dtype))));
  const int modes = Fp8PlanModes(a);
  return impl_->GetPlan(DType::kU8, a.out_dtype, a.x, a.w, a.bias, a.out, a.m, a.n, a.k, modes).status();
}

absl::Status CublasLtGemm::RunFp8(const Fp8GemmArgs& a, Stream stream) {
  if (a.m == 0) return absl::OkStatus();
  RETURN_IF_ERROR(PlanFp8(a));
  const int modes = Fp8PlanModes(a);
  ASSIGN_OR_RETURN(Plan* plan, impl_->GetPlan(DType::kU8, a.out_dtype, a.x, a.w, a.bias, a.out, a.m, a.n, a.k, modes));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a.w_scale,
                                                        sizeof(a.w_scale)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a.x_scale,
                                                        sizeof(a.x_scale)));
  return impl_->Matmul(*plan, plan->algo, a.x, a.w, a.bias, a.out, stream);
}

absl::Status CublasLtGemm::Run(DType dtype, DType out_dtype, const void* x, const void* w, const void* bias,
                               void* out, int64_t m, int64_t n, int64_t k, Stream stream, int64_t ldc) {
  if (m <= 0 || n <= 0 || k <= 0 || (ldc != 0 && ldc < n)) {
    if (m == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("Linear: bad shape m ", m, " n ", n, " k ", k));
  }
  if (out_dtype != dtype && out_dtype != DType::kF32)
    return absl::InvalidArgumentError("Linear: output dtype must be the input dtype or float32");
  ASSIGN_OR_RETURN(Plan* plan, impl_->GetPlan(dtype, out_dtype, x, w, bias, out, m, n, k, -1, ldc));
  return impl_->Matmul(*plan, plan->algo, x, w, bias, out, stream);
}

absl::StatusOr<std::vector<float>> CublasLtGemm::Tune(DType dtype, DType out_dtype, const void* x, const void* w,
                                                      const void* bias, void* out, int64_t m, int64_t n, int64_t k,
                                                      Stream stream, int candidates,
                                                      const std::function<absl::Status()>& before_each) {
  if (m <= 0 || n <= 0 || k <= 0) return absl::InvalidArgumentError("Linear: bad shape to tune");
  ASSIGN_OR_RETURN(Plan* plan, impl_->GetPlan(dtype, out_dtype, x, w, bias, out, m, n, k));
  const int count = std::min<int>(candidates, static_cast<int>(plan->candidates.size()));
  CandidateTiming timing;
  timing.drop_failed = true;  // e.g. an algorithm that cannot use this workspace
  ASSIGN_OR_RETURN(std::vector<float> median,
                   TimeCandidates(reinterpret_cast<cudaStream_t>(stream), count, timing, before_each, [&](int c) {
                     return impl_->Matmul(*plan, plan->candidates[c], x, w, bias, out, stream);
                   }));
  // A challenger must win clearly (3%), so that near ties do not flip between processes.
  int best = 0;
  for (int c = 1; c < count; ++c)
    if (median[c] < 0.97f * median[best]) best = c;
  plan->algo = plan->candidates[best];
  return median;
}

}  // namespace llm::cuda
