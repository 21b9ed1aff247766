// Every CUDA backend op against the float32 CPU backend, on fresh random inputs of many shapes, in
// float32, float16 and bfloat16. Inputs are rounded to the device dtype first, so the error
// measures the kernels alone; outputs are poisoned with NaN first, so an unwritten element fails.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "tests/cuda/cuda_test_util.h"

namespace llm {
namespace {

using testing::Download;
using testing::MakeTensor;
using testing::OwnedTensor;
using testing::Poison;
using testing::RaggedDecodes;
using testing::RandomVec;
using testing::RelErr;
using testing::RoundTo;
using testing::Tolerance;
using testing::Upload;
using testing::UploadI32;

constexpr int kGemvRows = 8;  // the GEMV kernel's largest M, tested whatever the default threshold

class CudaOpsTest : public testing::CudaAgainstCpuTest {
 protected:
  CudaOpsTest() : CudaAgainstCpuTest(1234) {}
  OwnedTensor Dev(Shape s, const std::vector<float>& v) { return Upload(*gpu_, dtype_, s, v); }
  OwnedTensor Host(Shape s, const std::vector<float>& v) { return Upload(cpu_, DType::kF32, s, v); }
  OwnedTensor DevOut(Shape s, DType t) {
    OwnedTensor o = MakeTensor(*gpu_, t, s);
    Poison(*gpu_, o.t);
    return o;
  }
  // The float32 CPU reference of x [m, k] times the transpose of `host_w` [n, k] (float32, on the CPU).
  std::vector<float> CpuLinear(const Tensor& host_w, const std::vector<float>& x, int64_t m, int64_t n, int64_t k) {
    OwnedTensor hx = Host({m, k}, x);
    OwnedTensor hout = MakeTensor(cpu_, DType::kF32, {m, n});
    LinearWeight hw;
    hw.weight = host_w;
    hw.format = StorageFormat::Float(DType::kF32);
    EXPECT_TRUE(cpu_.Linear(hx.t, hw, hout.t).ok());
    return Download(cpu_, hout.t);
  }
  void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    const double err = RelErr(got, want);
    EXPECT_LE(err, tol) << what << " (" << testing::DTypeLabel(dtype_) << ")";
  }
};

TEST_P(CudaOpsTest, Embedding) {
  for (int64_t dim : {64, 100, 4096}) {
    const int64_t rows = 500, offset = 250;
    const std::vector<float> table = Rand(rows * dim);
    std::vector<int32_t> ids;
    for (int i = 0; i < 37; ++i) ids.push_back(static_cast<int32_t>(rng_() % 1000));  // some outside the shard
    ids.push_back(offset);
    ids.push_back(offset + rows - 1);
    const int64_t n = static_cast<int64_t>(ids.size());
    OwnedTensor dt = Dev({rows, dim}, table), dids = UploadI32(*gpu_, ids), dout = DevOut({n, dim}, dtype_);
    OwnedTensor ht = Host({rows, dim}, table), hids = UploadI32(cpu_, ids), hout = MakeTensor(cpu_, DType::kF32, {n, dim});
    ASSERT_TRUE(gpu_->Embedding(dt.t, dids.t, offset, dout.t).ok());
    ASSERT_TRUE(cpu_.Embedding(ht.t, hids.t, offset, hout.t).ok());
    EXPECT_EQ(Download(*gpu_, dout.t), Download(cpu_, hout.t)) << "dim " << dim;  // a copy: exact
  }
}

TEST_P(CudaOpsTest, RmsNormAndAddRmsNorm) {
  for (int64_t rows : {1, 7, 300}) {
    for (int64_t dim : {64, 100, 4096, 5123}) {
      const std::vector<float> res = Rand(rows * dim, -2, 2), delta = Rand(rows * dim), w = Rand(dim, 0.5, 1.5);
      const std::string what = "rows " + std::to_string(rows) + " dim " + std::to_string(dim);
      // Plain RmsNorm.
      {
        OwnedTensor x = Dev({rows, dim}, res), dw = Dev({dim}, w), out = DevOut({rows, dim}, dtype_);
        OwnedTensor hx = Host({rows, dim}, res), hw = Host({dim}, w), hout = MakeTensor(cpu_, DType::kF32, {rows, dim});
        ASSERT_TRUE(gpu_->RmsNorm(x.t, dw.t, 1e-5f, out.t).ok());
        ASSERT_TRUE(cpu_.RmsNorm(hx.t, hw.t, 1e-5f, hout.t).ok());
        ExpectClose(Download(*gpu_, out.t), Download(cpu_, hout.t), Tolerance(dtype_), "RmsNorm " + what);
      }
      // Fused residual add: the residual (stored in the device dtype) and the normalized output.
      {
        OwnedTensor r = Dev({rows, dim}, res), d = Dev({rows, dim}, delta), dw = Dev({dim}, w);
        OwnedTensor out = DevOut({rows, dim}, dtype_);
        ASSERT_TRUE(gpu_->AddRmsNorm(r.t, d.t, dw.t, 1e-6f, out.t).ok());
        std::vector<float> sum(res.size());
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = res[i] + delta[i];
        RoundTo(dtype_, sum);  // the device stores the residual in its dtype
        OwnedTensor hr = Host({rows, dim}, sum), hw = Host({dim}, w), hout = MakeTensor(cpu_, DType::kF32, {rows, dim});
        ASSERT_TRUE(cpu_.AddRmsNorm(hr.t, Tensor(), hw.t, 1e-6f, hout.t).ok());
        ExpectClose(Download(*gpu_, r.t), sum, Tolerance(dtype_) / 4, "AddRmsNorm residual " + what);
        ExpectClose(Download(*gpu_, out.t), Download(cpu_, hout.t), Tolerance(dtype_), "AddRmsNorm " + what);
      }
    }
  }
}

TEST_P(CudaOpsTest, AddAndSiluMul) {
  for (int64_t n : {1, 1000, 4099, 65536}) {
    const std::vector<float> a = Rand(n), b = Rand(n);
    OwnedTensor x = Dev({n}, a), y = Dev({n}, b);
    ASSERT_TRUE(gpu_->Add(x.t, y.t).ok());
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = a[i] + b[i];
    ExpectClose(Download(*gpu_, x.t), want, Tolerance(dtype_), "Add n " + std::to_string(n));
  }
  for (int64_t rows : {1, 5, 128}) {
    for (int64_t f : {64, 100, 14336}) {
      const std::vector<float> gu = Rand(rows * 2 * f, -4, 4);
      OwnedTensor d = Dev({rows, 2 * f}, gu), out = DevOut({rows, f}, dtype_);
      OwnedTensor h = Host({rows, 2 * f}, gu), hout = MakeTensor(cpu_, DType::kF32, {rows, f});
      ASSERT_TRUE(gpu_->SiluMul(d.t, out.t).ok());
      ASSERT_TRUE(cpu_.SiluMul(h.t, hout.t).ok());
      ExpectClose(Download(*gpu_, out.t), Download(cpu_, hout.t), Tolerance(dtype_),
                  "SiluMul rows " + std::to_string(rows) + " f " + std::to_string(f));
    }
  }
}

TEST_P(CudaOpsTest, GatherRows) {
  for (int64_t width : {64, 77, 4096}) {
    const int64_t rows = 50;
    const std::vector<float> x = Rand(rows * width);
    std::vector<int32_t> idx = {49, 0, 7, 7, 13};
    const int64_t n = static_cast<int64_t>(idx.size());
    OwnedTensor dx = Dev({rows, width}, x), di = UploadI32(*gpu_, idx), dout = DevOut({n, width}, dtype_);
    OwnedTensor hx = Host({rows, width}, x), hi = UploadI32(cpu_, idx), hout = MakeTensor(cpu_, DType::kF32, {n, width});
    ASSERT_TRUE(gpu_->GatherRows(dx.t, di.t, dout.t).ok());
    ASSERT_TRUE(cpu_.GatherRows(hx.t, hi.t, hout.t).ok());
    EXPECT_EQ(Download(*gpu_, dout.t), Download(cpu_, hout.t)) << "width " << width;
    // float32 rows whatever the activation dtype: tensor parallelism puts all-gathered logits
    // shards in order with GatherRows.
    OwnedTensor fx = Upload(*gpu_, DType::kF32, {rows, width}, x), fout = DevOut({n, width}, DType::kF32);
    ASSERT_TRUE(gpu_->GatherRows(fx.t, di.t, fout.t).ok());
    EXPECT_EQ(Download(*gpu_, fout.t), Download(cpu_, hout.t)) << "float32, width " << width;
    // Mixed dtypes are refused.
    if (dtype_ != DType::kF32) {
      EXPECT_FALSE(gpu_->GatherRows(fx.t, di.t, dout.t).ok());
    }
  }
}

// Linear over M from 1 to thousands, odd N and K, with and without bias, activation-dtype and
// float32 outputs; small M through both the GEMV kernel and cuBLASLt.
TEST_P(CudaOpsTest, Linear) {
  struct Case {
    int64_t n, k;
  };
  // 512 x 7168 and 3000 x 2048: the ring GEMV splits rows into segments and balances uneven rows
  // over its warps.
  const Case cases[] = {{64, 64},    {100, 96},   {257, 72},    {384, 128}, {1000, 4096},
                        {129, 101},  {6144, 4096}, {512, 7168}, {3000, 2048}};
  const int64_t ms[] = {1, 2, 3, 4, 5, 8, 9, 16, 33, 128, 1024};
  for (const Case& c : cases) {
    // Weights once per shape, on both backends.
    const float a = 1.0f / std::sqrt(static_cast<float>(c.k));
    const std::vector<float> w = Rand(c.n * c.k, -a, a), b = Rand(c.n);
    OwnedTensor dwt = Dev({c.n, c.k}, w), hwt = Host({c.n, c.k}, w), dbt = Dev({c.n}, b);
    for (int64_t m : ms) {
      if (c.n * c.k * m > int64_t{1} << 32) continue;  // keep the CPU reference quick
      const std::vector<float> x = Rand(m * c.k);
      OwnedTensor dx = Dev({m, c.k}, x);
      const std::vector<float> ref = CpuLinear(hwt.t, x, m, c.n, c.k);
      std::vector<float> ref_bias = ref;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < c.n; ++j) ref_bias[i * c.n + j] += b[j];
      for (bool bias : {false, true}) {
        for (DType out_t : {dtype_, DType::kF32}) {
          // For small M the GEMV's fixed rule (the ring form at one row, else its own choice of
          // warps per row), then 1, 2, 4 and 8 warps per row, cuBLASLt, the default (the ring at
          // one row, else the timed choice among the others), and the shared-memory ring form
          // forced (default ring, then a 16 KB one: 1 KB units, two stages a warp, so every stage
          // is refilled many times); cuBLASLt beyond, then tuned (9).
          for (int variant = 0; variant < 10; ++variant) {
            if (variant > 0 && variant < 9 && m > kGemvRows) continue;
            gpu_->mutable_options().gemv_max_rows = variant == 5 || variant == 9 ? 0 : kGemvRows;
            // 9: cuBLASLt in a tuning pass, so that the shape's heuristic picks are timed and the
            // fastest kept (CublasLtGemm::Tune) before this call runs it.
            gpu_->SetTuningPass(variant == 9);
            gpu_->mutable_options().gemv_warps_per_row = variant >= 1 && variant <= 4 ? 1 << (variant - 1)
                                                         : variant >= 7 ? CudaBackendOptions::kGemvRingForm
                                                                        : 0;
            gpu_->mutable_options().gemv_ring_bytes = variant == 8 ? size_t{16} << 10 : 0;
            gpu_->mutable_options().autotune_linear = variant == 6;
            LinearWeight dw;
            dw.weight = dwt.t;
            dw.format = StorageFormat::Float(dtype_);  // declared, as the loader declares it
            if (bias) dw.bias = dbt.t;
            OwnedTensor dout = DevOut({m, c.n}, out_t);
            const auto st = gpu_->Linear(dx.t, dw, dout.t);
            ASSERT_TRUE(st.ok()) << st;
            const double tol = out_t == DType::kF32 && dtype_ != DType::kF32 ? Tolerance(dtype_) / 4 : Tolerance(dtype_);
            ExpectClose(Download(*gpu_, dout.t), bias ? ref_bias : ref, tol,
                        "Linear m " + std::to_string(m) + " n " + std::to_string(c.n) + " k " + std::to_string(c.k) +
                            (bias ? " bias" : "") + " out " + testing::DTypeLabel(out_t) + " variant " +
                            std::to_string(variant));
          }
        }
      }
    }
  }
  gpu_->mutable_options().gemv_max_rows = kGemvRows;
  gpu_->mutable_options().gemv_warps_per_row = 0;
  gpu_->mutable_options().gemv_ring_bytes = 0;
  gpu_->mutable_options().autotune_linear = true;
  gpu_->SetTuningPass(false);
}

// The gate/up projection and SiLU-and-mul in one kernel (Backend::LinearSiluMul): the register
// GEMV's gate/up form, bit for bit what Linear then SiluMul give, and near the CPU's float32. F
// not a multiple of 4, weights whose GEMV splits rows over several warps (1792 x 4096: 4 warps a
// row, summed in another order), and the forms without a fused epilogue (the ring, cuBLASLt) run
// unfused.
TEST_P(CudaOpsTest, LinearSiluMulFusedInTheGemv) {
  struct Case {
    int64_t f, k;
    bool fused;
  };
  const Case cases[] = {{32, 64, true}, {100, 96, true}, {1792, 256, true}, {1792, 4096, false}, {50, 128, false}};
  for (const Case& c : cases) {
    const int64_t n = 2 * c.f;
    const float a = 1.0f / std::sqrt(static_cast<float>(c.k));
    const std::vector<float> w = Rand(n * c.k, -a, a), b = Rand(n);
    OwnedTensor dwt = Dev({n, c.k}, w), hwt = Host({n, c.k}, w), dbt = Dev({n}, b), hbt = Host({n}, b);
    for (int64_t m : {1, 2, 3, 4, 8}) {
      for (bool bias : {false, true}) {
        for (int form = 0; form < 3; ++form) {  // 0: the register GEMV, 1: the ring, 2: cuBLASLt
          gpu_->mutable_options().autotune_linear = false;
          gpu_->mutable_options().gemv_smem_ring = form == 1;
          gpu_->mutable_options().gemv_max_rows = form == 2 ? 0 : kGemvRows;
          gpu_->mutable_options().gemv_warps_per_row = form == 1 ? CudaBackendOptions::kGemvRingForm : 0;
          const bool gemv = form == 0 && m <= kGemvRows;
          LinearWeight dw;
          dw.weight = dwt.t;
          dw.format = StorageFormat::Float(dtype_);
          if (bias) dw.bias = dbt.t;
          const std::vector<float> x = Rand(m * c.k, -2.0f, 2.0f);
          OwnedTensor dx = Dev({m, c.k}, x);
          const std::string what = "LinearSiluMul m " + std::to_string(m) + " F " + std::to_string(c.f) + " K " +
                                   std::to_string(c.k) + (bias ? " bias" : "") + " form " + std::to_string(form);
          const std::vector<float> got = testing::CheckLinearSiluMul(*gpu_, dx.t, dw, m, gemv && c.fused, what);
          LinearWeight hw;
          hw.weight = hwt.t;
          hw.format = StorageFormat::Float(DType::kF32);
          if (bias) hw.bias = hbt.t;
          OwnedTensor hx = Host({m, c.k}, x), hscratch = MakeTensor(cpu_, DType::kF32, {m, n});
          OwnedTensor hout = MakeTensor(cpu_, DType::kF32, {m, c.f});
          ASSERT_TRUE(cpu_.LinearSiluMul(hx.t, hw, hscratch.t, hout.t).ok());
          ExpectClose(got, Download(cpu_, hout.t), 2 * Tolerance(dtype_), what);
        }
      }
    }
  }
  gpu_->mutable_options().autotune_linear = true;
  gpu_->mutable_options().gemv_smem_ring = true;
  gpu_->mutable_options().gemv_max_rows = kGemvRows;
  gpu_->mutable_options().gemv_warps_per_row = 0;
}

// The few-rows GEMM (gemm_few_rows.h) through Linear: every token-tile count, both tile heights,
// shapes whose stream-K ranges split tiles between blocks (narrow N, long K) and shapes with a
// partial last tile, every (tile rows, step columns) form. Each call runs twice into fresh
// outputs: the second proves the first left its counters zero, and equals the first bit for bit
// (straddling tiles are summed in a fixed order); a captured call replayed three times does the same.
TEST_P(CudaOpsTest, GemmFewRows) {
  if (dtype_ == DType::kF32) GTEST_SKIP() << "16-bit weights only";
  struct Case {
    int64_t n, k;
  };
  const Case cases[] = {{8, 128}, {130, 384}, {1000, 4096}, {300, 14336}, {4096, 1024}, {2500, 640}};
  const int64_t ms[] = {1, 5, 8, 9, 16, 17, 31, 33, 64};
  CudaBackendOptions& o = gpu_->mutable_options();
  o.gemv_max_rows = 0;  // every row count to the few-rows GEMM
  o.gemm_few_rows_16bit_max_rows = 64;
  for (const Case& c : cases) {
    const float a = 1.0f / std::sqrt(static_cast<float>(c.k));
    const std::vector<float> w = Rand(c.n * c.k, -a, a), b = Rand(c.n);
    OwnedTensor dwt = Dev({c.n, c.k}, w), hwt = Host({c.n, c.k}, w), dbt = Dev({c.n}, b);
    for (int64_t m : ms) {
      const std::vector<float> x = Rand(m * c.k);
      OwnedTensor dx = Dev({m, c.k}, x);
      std::vector<float> ref = CpuLinear(hwt.t, x, m, c.n, c.k);
      const bool bias = m % 2 == 1;
      if (bias)
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < c.n; ++j) ref[i * c.n + j] += b[j];
      // (tile rows, step columns): every form; a step that does not divide K halves until it does.
      for (const auto& [tile_rows, step_cols] : {std::pair{128, 128}, {128, 256}, {256, 128}}) {
        o.gemm_few_rows_tile_rows = tile_rows;
        o.gemm_few_rows_step_cols = step_cols;
        LinearWeight dw;
        dw.weight = dwt.t;
        dw.format = StorageFormat::Float(dtype_);
        if (bias) dw.bias = dbt.t;
        const std::string what = "few-rows m " + std::to_string(m) + " n " + std::to_string(c.n) + " k " +
                                 std::to_string(c.k) + " tile " + std::to_string(tile_rows) + " step " +
                                 std::to_string(step_cols);
        std::vector<float> first_call;
        for (int call = 0; call < 2; ++call) {
          OwnedTensor dout = DevOut({m, c.n}, dtype_);
          gpu_->StartOpTiming();
          const auto st = gpu_->Linear(dx.t, dw, dout.t);
          ASSERT_TRUE(st.ok()) << st;
          const auto timings = gpu_->CollectOpTimings();
          ASSERT_TRUE(timings.ok()) << timings.status();
          ASSERT_EQ(timings->size(), 1u);
          EXPECT_NE((*timings)[0].op.find("few-rows gemm"), std::string::npos) << what << ": " << (*timings)[0].op;
          const std::vector<float> got = Download(*gpu_, dout.t);
          ExpectClose(got, ref, Tolerance(dtype_), what + " call " + std::to_string(call));
          if (call == 0) first_call = got;
          else EXPECT_EQ(got, first_call) << what << ": the second call differs from the first";
        }
      }
    }
  }
  // Graph replays of one call (tiles split between blocks: 300 rows, K = 14336).
  {
    const int64_t m = 33, n = 300, k = 14336;
    const float a = 1.0f / std::sqrt(static_cast<float>(k));
    const std::vector<float> w = Rand(n * k, -a, a), x = Rand(m * k);
    OwnedTensor dwt = Dev({n, k}, w), hwt = Host({n, k}, w), dx = Dev({m, k}, x);
    const std::vector<float> ref = CpuLinear(hwt.t, x, m, n, k);
    LinearWeight dw;
    dw.weight = dwt.t;
    dw.format = StorageFormat::Float(dtype_);
    OwnedTensor dout = DevOut({m, n}, dtype_);
    ASSERT_TRUE(gpu_->BeginCapture().ok());
    const absl::Status st = gpu_->Linear(dx.t, dw, dout.t);
    auto graph = gpu_->EndCapture();
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(graph.ok()) << graph.status();
    OwnedTensor eager = DevOut({m, n}, dtype_);
    ASSERT_TRUE(gpu_->Linear(dx.t, dw, eager.t).ok());
    for (int replay = 0; replay < 3; ++replay) {
      Poison(*gpu_, dout.t);
      ASSERT_TRUE((*graph)->Replay().ok());
      const std::vector<float> got = Download(*gpu_, dout.t);
      ExpectClose(got, ref, Tolerance(dtype_), "few-rows graph replay " + std::to_string(replay));
      EXPECT_EQ(got, Download(*gpu_, eager.t)) << "graph replay " << replay << " differs from the eager call";
    }
  }
  o.gemv_max_rows = kGemvRows;
  o.gemm_few_rows_16bit_max_rows = 0;
  o.gemm_few_rows_tile_rows = 0;
  o.gemm_few_rows_step_cols = 0;
}

std::vector<float> InvFreq(int rotary_dim, double theta) {
  std::vector<float> f(rotary_dim / 2);
  for (int i = 0; i < rotary_dim / 2; ++i) f[i] = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / rotary_dim));
  return f;
}

// Fused QKV split + q/k norm + RoPE + paged KV write; the whole cache is compared, so stray writes
// show too.
TEST_P(CudaOpsTest, QkvRope) {
  struct Case {
    int t, heads, kv_heads, head_dim, rotary_dim;
    bool norm;
  };
  const Case cases[] = {{1, 8, 2, 128, 128, false},  {5, 4, 4, 64, 64, true},   {64, 8, 1, 128, 64, false},
                        {17, 6, 2, 80, 80, true},    {33, 8, 4, 16, 16, false}, {300, 32, 8, 128, 128, false},
                        {3, 2, 1, 256, 256, true}};
  for (const Case& c : cases) {
    const int64_t block_size = 16, blocks = (c.t + 15) / 16 + 3;
    const int64_t qkv_w = static_cast<int64_t>(c.heads + 2 * c.kv_heads) * c.head_dim;
    const std::vector<float> qkv = Rand(c.t * qkv_w, -2, 2), qn = Rand(c.head_dim, 0.5, 1.5),
                             kn = Rand(c.head_dim, 0.5, 1.5);
    const Shape cache_shape{blocks, c.kv_heads, block_size, c.head_dim};
    const std::vector<float> kc = Rand(cache_shape.numel()), vc = Rand(cache_shape.numel());
    std::vector<int32_t> pos(c.t), slots(c.t);
    std::vector<int32_t> perm(blocks * block_size);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng_);
    for (int i = 0; i < c.t; ++i) {
      pos[i] = static_cast<int32_t>(rng_() % 5000);
      slots[i] = i % 7 == 3 ? -1 : perm[i];
    }
    const std::vector<float> inv = InvFreq(c.rotary_dim, 500000.0);
    auto run = [&](Backend& b, DType t, Tensor q_out, OwnedTensor& k, OwnedTensor& v) {
      OwnedTensor tq = Upload(b, t, {c.t, qkv_w}, qkv), tqn = Upload(b, t, {c.head_dim}, qn),
                  tkn = Upload(b, t, {c.head_dim}, kn), tinv = Upload(b, DType::kF32, {c.rotary_dim / 2}, inv);
      OwnedTensor tp = UploadI32(b, pos), ts = UploadI32(b, slots);
      QkvRopeArgs a;
      a.qkv = tq.t;
      a.num_heads = c.heads;
      a.num_kv_heads = c.kv_heads;
      a.head_dim = c.head_dim;
      if (c.norm) {
        a.q_norm = tqn.t;
        a.k_norm = tkn.t;
      }
      a.norm_eps = 1e-6f;
      a.rope.inv_freq = tinv.t;
      a.rope.rotary_dim = c.rotary_dim;
      a.rope.attention_scaling = 1.0f;
      a.positions = tp.t;
      a.slot_mapping = ts.t;
      a.cache = {k.t, v.t};
      a.q_out = q_out;
      const auto st = b.QkvRope(a);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_TRUE(b.Synchronize().ok());
    };
    OwnedTensor dk = Dev(cache_shape, kc), dv = Dev(cache_shape, vc), dq = DevOut({c.t, c.heads * c.head_dim}, dtype_);
    OwnedTensor hk = Host(cache_shape, kc), hv = Host(cache_shape, vc);
    OwnedTensor hq = MakeTensor(cpu_, DType::kF32, {c.t, c.heads * c.head_dim});
    run(*gpu_, dtype_, dq.t, dk, dv);
    run(cpu_, DType::kF32, hq.t, hk, hv);
    const std::string what = "t " + std::to_string(c.t) + " heads " + std::to_string(c.heads) + "/" +
                             std::to_string(c.kv_heads) + " d " + std::to_string(c.head_dim);
    ExpectClose(Download(*gpu_, dq.t), Download(cpu_, hq.t), Tolerance(dtype_), "QkvRope q " + what);
    ExpectClose(Download(*gpu_, dk.t), Download(cpu_, hk.t), Tolerance(dtype_), "QkvRope k cache " + what);
    EXPECT_EQ(Download(*gpu_, dv.t), Download(cpu_, hv.t)) << "QkvRope v cache " << what;
  }
}

// A ragged step over a paged cache: per sequence (query_len, context_len); blocks are shuffled so
// tables are not contiguous.
struct AttnCase {
  std::string name;
  std::vector<std::pair<int, int>> seqs;
  int heads, kv_heads, head_dim;
  int block_size = 16;
  int window = 0;
};

class AttentionHarness {
 public:
  AttentionHarness(const AttnCase& c, DType dtype, std::mt19937& rng) : c_(c), dtype_(dtype) {
    int64_t total_blocks = 1;
    for (auto [q, ctx] : c.seqs) total_blocks += (ctx + c.block_size - 1) / c.block_size;
    blocks_ = total_blocks + 2;
    width_ = 1;
    for (auto [q, ctx] : c.seqs) width_ = std::max<int64_t>(width_, (ctx + c.block_size - 1) / c.block_size);
    std::vector<int32_t> perm(blocks_);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    int next = 0;
    qs_.push_back(0);
    for (auto [q, ctx] : c.seqs) {
      for (int64_t b = 0; b < width_; ++b) tables_.push_back(b < (ctx + c.block_size - 1) / c.block_size ? perm[next + b] : -1);
      next += (ctx + c.block_size - 1) / c.block_size;
      for (int i = 0; i < q; ++i) positions_.push_back(ctx - q + i);
      qs_.push_back(qs_.back() + q);
      ctx_.push_back(ctx);
      max_q_ = std::max(max_q_, q);
      max_ctx_ = std::max(max_ctx_, ctx);
    }
    tokens_ = qs_.back();
    cache_shape_ = Shape{blocks_, c.kv_heads, c.block_size, c.head_dim};
    k_ = RandomVec(rng, cache_shape_.numel(), -2, 2);
    v_ = RandomVec(rng, cache_shape_.numel());
    q_ = RandomVec(rng, static_cast<size_t>(tokens_) * c.heads * c.head_dim, -2, 2);
    RoundTo(dtype, k_);
    RoundTo(dtype, v_);
    RoundTo(dtype, q_);
    // The slots of each sequence's last page past its context hold NaN (a page's unwritten slots
    // may hold anything, e.g. a finished sequence's keys): no kernel may let them into a result.
    next = 0;
    for (auto [q, ctx] : c.seqs) {
      const int nb = (ctx + c.block_size - 1) / c.block_size;
      const int64_t page = perm[next + nb - 1];
      for (int slot = ctx - (nb - 1) * c.block_size; slot < c.block_size; ++slot)
        for (int kvh = 0; kvh < c.kv_heads; ++kvh)
          for (int e = 0; e < c.head_dim; ++e) {
            const int64_t at = ((page * c.kv_heads + kvh) * c.block_size + slot) * c.head_dim + e;
            k_[at] = v_[at] = std::numeric_limits<float>::quiet_NaN();
          }
      next += nb;
    }
  }

  // Runs the op on `b` (tensors in `t`); returns the output as floats.
  std::vector<float> Run(Backend& b, DType t, CudaBackend* poison) {
    OwnedTensor k = Upload(b, t, cache_shape_, k_), v = Upload(b, t, cache_shape_, v_);
    OwnedTensor q = Upload(b, t, {tokens_, int64_t{c_.heads} * c_.head_dim}, q_);
    OwnedTensor out = MakeTensor(b, t, {tokens_, int64_t{c_.heads} * c_.head_dim});
    if (poison) Poison(*poison, out.t);
    OwnedTensor qs = UploadI32(b, qs_), ctx = UploadI32(b, ctx_), tables = UploadI32(b, tables_),
                pos = UploadI32(b, positions_);
    StepMetadata meta;
    meta.num_tokens = static_cast<int32_t>(tokens_);
    meta.num_seqs = static_cast<int32_t>(c_.seqs.size());
    meta.max_query_len = max_q_;
    meta.max_context_len = max_ctx_;
    // Leading single-token sequences, as ModelRunner counts them: the decode kernel takes them.
    while (meta.num_decode_seqs < meta.num_seqs && c_.seqs[meta.num_decode_seqs].first == 1) ++meta.num_decode_seqs;
    meta.positions = pos.t;
    meta.query_start = qs.t;
    meta.context_lens = ctx.t;
    meta.block_tables = tables.t.Reshape({meta.num_seqs, width_});
    AttentionArgs a;
    a.q = q.t;
    a.num_heads = c_.heads;
    a.num_kv_heads = c_.kv_heads;
    a.head_dim = c_.head_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
    a.sliding_window = c_.window;
    a.cache = {k.t, v.t};
    a.meta = &meta;
    a.out = out.t;
    const auto st = b.Attention(a);
    EXPECT_TRUE(st.ok()) << st;
    return Download(b, out.t);
  }

 private:
  AttnCase c_;
  DType dtype_;
  int64_t blocks_ = 0, width_ = 0, tokens_ = 0;
  int max_q_ = 0, max_ctx_ = 0;
  std::vector<int32_t> qs_, ctx_, tables_, positions_;
  Shape cache_shape_;
  std::vector<float> k_, v_, q_;
};

std::vector<AttnCase> AttentionCases() {
  return {
      {"decode_gqa", {{1, 1}, {1, 17}, {1, 300}, {1, 1000}}, 8, 2, 128},
      {"decode_batch_llama",
       {{1, 1024}, {1, 1024}, {1, 999}, {1, 1025}, {1, 64}, {1, 1}, {1, 513}, {1, 2}},
       32,
       8,
       128},
      // 24 sequences x 8 KV heads: blocks enough to fill an H100/H200, so the decode kernel takes
      // its 128-register variant (V through shared memory).
      {"decode_batch_fills_gpu",
       {{1, 700}, {1, 33},  {1, 1},   {1, 256}, {1, 257}, {1, 1000}, {1, 31},  {1, 64},
        {1, 65},  {1, 500}, {1, 129}, {1, 2},   {1, 300}, {1, 301},  {1, 17},  {1, 800},
        {1, 96},  {1, 97},  {1, 640}, {1, 5},   {1, 450}, {1, 255},  {1, 511}, {1, 512}},
       32,
       8,
       128},
      {"prefill_single", {{100, 100}}, 32, 8, 128},
      {"prefill_hd64", {{130, 130}, {3, 3}}, 8, 8, 64},
      {"mixed_ragged", {{37, 37}, {1, 200}, {64, 129}, {5, 70}, {1, 1}}, 8, 2, 128},
      // Decodes first, then prefills (as the scheduler orders a mixed step): the decode kernel for
      // the leading ones, the prefill kernel for the rest (a late single-token one included).
      {"mixed_decodes_first",
       {{1, 300}, {1, 17}, {1, 1}, {1, 1000}, {37, 37}, {64, 129}, {1, 200}},
       32,
       8,
       128},
      {"mixed_decodes_fill_gpu",
       {{1, 700}, {1, 33},  {1, 1},   {1, 256}, {1, 257},   {1, 1000}, {1, 31}, {1, 64},
        {1, 65},  {1, 500}, {1, 129}, {1, 2},   {1, 300},   {1, 301},  {1, 17}, {1, 800},
        {1, 96},  {1, 97},  {1, 640}, {1, 5},   {128, 128}, {100, 612}},
       32,
       8,
       128},
      {"mixed_decodes_hd64_block12", {{1, 77}, {1, 500}, {70, 70}}, 8, 2, 64, 12},
      {"chunked_prefill", {{64, 1000}, {130, 4100}}, 8, 2, 128},
      {"long_decode_split", {{1, 8192}, {1, 16384}, {1, 3}}, 32, 8, 128},
      {"mqa", {{1, 500}, {20, 500}}, 8, 1, 128},
      {"mha_hd16", {{1, 50}, {33, 40}}, 4, 4, 16},
      {"group3_hd80", {{1, 300}, {40, 90}}, 6, 2, 80},
      {"hd96_block8", {{1, 77}, {9, 140}}, 4, 2, 96, 8},
      // Pages that are not a power of two: the kernels' division path.
      {"prefill_block12", {{70, 70}, {1, 40}, {130, 300}}, 8, 2, 128, 12},
      {"decode_block12", {{1, 77}, {1, 500}}, 8, 2, 64, 12},
      {"hd32_qwen", {{1, 100}, {33, 33}}, 4, 2, 32},
      {"hd256", {{1, 200}, {17, 60}}, 4, 2, 256},
      {"window_prefill", {{90, 200}}, 8, 2, 128, 16, 50},
      {"window_decode", {{1, 300}, {1, 20}}, 8, 2, 64, 16, 50},
      {"group16", {{1, 700}, {6, 30}}, 32, 2, 128},
      // Groups that leave query rows of a head tile unused (6 of 8; 8 and 4 of 8 in two tiles).
      {"group6_decode", {{1, 300}, {1, 40}, {1, 1}}, 12, 2, 128},
      {"group12_decode_hd64", {{1, 515}, {1, 16}}, 24, 2, 64},
      // One and two query heads a KV head (Llama-2-7B's MHA; a group of 2), head_dim 128.
      {"mha_decode", {{1, 300}, {1, 5}, {1, 1000}}, 8, 8, 128},
      {"group2_decode", {{1, 77}, {1, 600}, {1, 2048}}, 8, 4, 128},
      // More (sequence, KV head) blocks than two an SM hold (a second wave), ragged contexts.
      {"many_decodes", RaggedDecodes(40), 32, 8, 128},
      {"many_decodes_window", RaggedDecodes(40), 32, 8, 64, 16, 100},
      // (sequence, KV head) rows near one an SM (128 on a 132-SM GPU): a 16-bit cache takes no split.
      {"decodes_near_one_block_an_sm", RaggedDecodes(16), 32, 8, 128},
  };
}

TEST_P(CudaOpsTest, PagedAttention) {
  for (const AttnCase& c : AttentionCases()) {
    AttentionHarness h(c, dtype_, rng_);
    const std::vector<float> want = h.Run(cpu_, DType::kF32, nullptr);
    for (int variant = 0; variant < 7; ++variant) {
      // variant 0: default kernels; 1: SIMT only; 2: SIMT with a fixed 7-way decode split; 3: default
      // kernels with a fixed 7-way decode split (the decode kernel's slices and their merge); 4, 5:
      // the CUDA-core decode kernel instead of the tensor-core one, without and with the split; 6:
      // a mixed step's prefill attention after its decode attention on one stream (by default the
      // two run side by side on two streams).
      gpu_->mutable_options().force_simt_attention = variant == 1 || variant == 2;
      gpu_->mutable_options().attention_splits = variant == 2 || variant == 3 || variant == 5 ? 7 : 0;
      gpu_->mutable_options().warp_decode_attention = variant == 4 || variant == 5;
      gpu_->mutable_options().serial_mixed_attention = variant == 6;
      const std::vector<float> got = h.Run(*gpu_, dtype_, gpu_.get());
      ExpectClose(got, want, Tolerance(dtype_), "Attention " + c.name + " variant " + std::to_string(variant));
    }
  }
  gpu_->mutable_options().force_simt_attention = false;
  gpu_->mutable_options().attention_splits = 0;
  gpu_->mutable_options().warp_decode_attention = false;
  gpu_->mutable_options().serial_mixed_attention = false;
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaOpsTest, ::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                         [](const auto& info) { return testing::DTypeLabel(info.param); });

}  // namespace
}  // namespace llm
