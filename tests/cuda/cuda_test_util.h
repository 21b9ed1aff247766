// Helpers for testing CUDA backend ops against the float32 CPU backend: random inputs rounded to
// the device dtype (so both sides see the same values), upload/download, poisoning and error norms.
#pragma once

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace llm::testing {

// ‖a − b‖ / ‖b‖, NaN-aware (any NaN in `a` gives +inf).
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) && std::isfinite(b[i])) return INFINITY;
    const double d = double(a[i]) - b[i];
    num += d * d;
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Error bands (METHOD.md): float32 arithmetic far under 1e-3, bf16 operands 1e-3..1e-2.
inline double Tolerance(DType t) {
  switch (t) {
    case DType::kF32: return 2e-5;
    case DType::kF16: return 3e-3;
    default: return 1.2e-2;
  }
}

inline std::vector<float> RandomVec(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Rounds float values to `t` and back, in place.
inline void RoundTo(DType t, std::vector<float>& v) {
  if (t == DType::kF32) return;
  std::vector<uint16_t> tmp(v.size());
  ConvertFromFloat(v.data(), t, tmp.data(), v.size());
  ConvertToFloat(t, tmp.data(), v.data(), v.size());
}

// An owned tensor on some backend.
struct OwnedTensor {
  Buffer buffer;
  Tensor t;
};

inline OwnedTensor MakeTensor(Backend& b, DType dtype, Shape shape) {
  auto buf = b.Allocate(static_cast<size_t>(shape.numel()) * DTypeSize(dtype) + 16);
  EXPECT_TRUE(buf.ok()) << buf.status();
  OwnedTensor o{std::move(*buf), {}};
  o.t = o.buffer.View(dtype, shape);
  return o;
}

// Uploads float values converted to the tensor's dtype.
inline OwnedTensor Upload(Backend& b, DType dtype, Shape shape, const std::vector<float>& v) {
  OwnedTensor o = MakeTensor(b, dtype, shape);
  EXPECT_EQ(static_cast<int64_t>(v.size()), shape.numel());
  EXPECT_TRUE(b.UploadConverted(v.data(), DType::kF32, o.t).ok());
  EXPECT_TRUE(b.Synchronize().ok());
  return o;
}

inline OwnedTensor UploadI32(Backend& b, const std::vector<int32_t>& v) {
  OwnedTensor o = MakeTensor(b, DType::kI32, Shape{static_cast<int64_t>(std::max<size_t>(v.size(), 1))});
  o.t = o.t.Rows(0, static_cast<int64_t>(v.size()));
  if (!v.empty()) {
    EXPECT_TRUE(b.CopyToDevice(o.t, v.data()).ok());
  }
  EXPECT_TRUE(b.Synchronize().ok());
  return o;
}

inline std::vector<float> Download(Backend& b, Tensor t) {
  std::vector<float> out(t.numel());
  if (t.dtype() == DType::kF32) {
    EXPECT_TRUE(b.CopyToHost(out.data(), t).ok());
    EXPECT_TRUE(b.Synchronize().ok());
    return out;
  }
  std::vector<uint16_t> raw(t.numel());
  EXPECT_TRUE(b.CopyToHost(raw.data(), t).ok());
  EXPECT_TRUE(b.Synchronize().ok());
  ConvertToFloat(t.dtype(), raw.data(), out.data(), out.size());
  return out;
}

// NaN in every element (0xFFFF.. is a NaN in f32, f16 and bf16): unwritten outputs show.
inline void Poison(CudaBackend& b, Tensor t) { ASSERT_TRUE(b.FillPattern(t, 0xFFFFFFFFu).ok()); }

inline std::string DTypeLabel(DType t) { return std::string(DTypeName(t)); }

// (query_len, context_len) of `n` one-token sequences of 1-900 keys, ragged: with 8 KV heads, 40 of
// them are more decode-attention blocks than two an SM hold (a second wave).
inline std::vector<std::pair<int, int>> RaggedDecodes(int n) {
  std::vector<std::pair<int, int>> seqs;
  for (int i = 0; i < n; ++i) seqs.push_back({1, 1 + (i * 397) % 900});
  return seqs;
}

inline std::unique_ptr<CudaBackend> MakeCuda(DType dtype, CudaBackendOptions options = {}) {
  options.dtype = dtype;
  auto b = CudaBackend::Create(options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

// The fixture of the op tests (ops, FP8, int4): a CUDA backend of the parameter's dtype beside the
// float32 CPU oracle, and random values rounded to that dtype, so that both sides see the same
// inputs. Each suite seeds its generator apart (`seed` + the dtype).
class CudaAgainstCpuTest : public ::testing::TestWithParam<DType> {
 protected:
  explicit CudaAgainstCpuTest(unsigned seed) : seed_(seed) {}
  void SetUp() override {
    dtype_ = GetParam();
    gpu_ = MakeCuda(dtype_);
    ASSERT_NE(gpu_, nullptr);
    rng_.seed(seed_ + static_cast<unsigned>(dtype_));
  }
  std::vector<float> Rand(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::vector<float> v = RandomVec(rng_, n, lo, hi);
    RoundTo(dtype_, v);
    return v;
  }

  DType dtype_ = DType::kF32;
  std::unique_ptr<CudaBackend> gpu_;
  CpuBackend cpu_{0};
  std::mt19937 rng_;

 private:
  unsigned seed_;
};

// Backend::LinearSiluMul of x [m, K] and a gate/up weight [2F, K] on `gpu`, fused (its op label
// "LinearSiluMul ..." where `want_fused`) and with the fusion off (Linear, then SiluMul: the
// kernels the CPU oracle is held to elsewhere): the same values bit for bit. Returns the fused
// output [m, F] for the caller to hold to the CPU.
inline std::vector<float> CheckLinearSiluMul(CudaBackend& gpu, Tensor x, const LinearWeight& w, int64_t m,
                                             bool want_fused, const std::string& what) {
  const DType dt = gpu.activation_dtype();
  const int64_t n = w.out_features(), f = n / 2;
  OwnedTensor scratch = MakeTensor(gpu, dt, {m, n}), fused = MakeTensor(gpu, dt, {m, f});
  OwnedTensor plain = MakeTensor(gpu, dt, {m, f});
  Poison(gpu, fused.t);
  Poison(gpu, plain.t);
  const bool was = gpu.options().fuse_gate_up_silu;
  gpu.mutable_options().fuse_gate_up_silu = true;
  gpu.StartOpTiming();
  absl::Status st = gpu.LinearSiluMul(x, w, scratch.t, fused.t);
  EXPECT_TRUE(st.ok()) << st << " " << what;
  auto ops = gpu.CollectOpTimings();
  EXPECT_TRUE(ops.ok() && !ops->empty()) << what;
  if (ops.ok() && !ops->empty()) {
    EXPECT_EQ(ops->front().op.rfind("LinearSiluMul", 0) == 0, want_fused) << what << ": ran " << ops->front().op;
  }
  gpu.mutable_options().fuse_gate_up_silu = false;
  st = gpu.LinearSiluMul(x, w, scratch.t, plain.t);
  EXPECT_TRUE(st.ok()) << st << " " << what;
  gpu.mutable_options().fuse_gate_up_silu = was;
  const std::vector<float> got = Download(gpu, fused.t), want = Download(gpu, plain.t);
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += !(got[i] == want[i]);
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << got.size() << " outputs differ from Linear + SiluMul";
  return got;
}

// The decode linears' fused norm and residual add (Backend::RmsNormLinear, LinearAddInto) on
// `gpu` for the weight `w` [N, K] at m rows: `rows` [m, K] un-normalized inputs, `norm` [K] the
// norm weight; with `glu` (w a gate/up weight) the gate/up form with SiLU-and-mul too, and no
// residual add. Fused (checked by the op labels where `want_norm_fused` / `want_add_fused`, and
// by FusesRmsNormInto / AddsIntoResidual) and
// with the fusion off (the norm kernel, then Linear; Linear, then Add: the kernels the CPU oracle
// is held to elsewhere): the same values bit for bit. Returns the fused norm-linear output for the
// caller to hold to the CPU.
inline std::vector<float> CheckFusedNormAndResidual(CudaBackend& gpu, Tensor rows, Tensor norm, float eps,
                                                    const LinearWeight& w, int64_t m, bool glu, bool want_norm_fused,
                                                    bool want_add_fused, const std::string& what) {
  const bool want_fused = want_norm_fused;
  const DType dt = gpu.activation_dtype();
  const int64_t n = w.out_features(), k = w.in_features(), out_cols = glu ? n / 2 : n;
  EXPECT_EQ(gpu.FusesRmsNormInto(w, m), want_fused) << what;
  EXPECT_EQ(gpu.AddsIntoResidual(w, m), want_add_fused) << what;
  OwnedTensor normed = MakeTensor(gpu, dt, {m, k}), out = MakeTensor(gpu, dt, {m, n});
  OwnedTensor fused = MakeTensor(gpu, dt, {m, out_cols}), apart = MakeTensor(gpu, dt, {m, out_cols});
  const bool was = gpu.options().fuse_decode_ops;
  auto norm_linear = [&](bool fuse, Tensor dst) {
    gpu.mutable_options().fuse_decode_ops = fuse;
    Poison(gpu, dst);
    gpu.StartOpTiming();
    const absl::Status st = glu ? gpu.RmsNormLinear(rows, norm, eps, normed.t, w, out.t, dst)
                                : gpu.RmsNormLinear(rows, norm, eps, normed.t, w, dst, Tensor());
    EXPECT_TRUE(st.ok()) << st << " " << what;
    auto ops = gpu.CollectOpTimings();
    EXPECT_TRUE(ops.ok() && !ops->empty()) << what;
    if (fuse && ops.ok() && !ops->empty()) {
      EXPECT_EQ(ops->front().op.rfind("RmsNormLinear", 0) == 0, want_fused) << what << ": ran " << ops->front().op;
    }
  };
  norm_linear(true, fused.t);
  norm_linear(false, apart.t);
  const std::vector<float> got = Download(gpu, fused.t), want = Download(gpu, apart.t);
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += !(got[i] == want[i]);
  EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << got.size() << " outputs differ from RmsNorm + Linear";

  // The residual add: rows (as x) through w into a residual [m, N] of the output's scale.
  if (!glu) {
    std::vector<float> start = Download(gpu, apart.t);
    for (size_t i = 0; i < start.size(); ++i) start[i] = 0.5f - 0.25f * static_cast<float>(i % 7) + 0.01f * start[i];
    OwnedTensor res_fused = Upload(gpu, dt, {m, n}, start), res_apart = Upload(gpu, dt, {m, n}, start);
    OwnedTensor delta = MakeTensor(gpu, dt, {m, n});
    gpu.mutable_options().fuse_decode_ops = true;
    gpu.StartOpTiming();
    absl::Status st = gpu.LinearAddInto(rows, w, res_fused.t, delta.t);
    EXPECT_TRUE(st.ok()) << st << " " << what;
    auto ops = gpu.CollectOpTimings();
    if (ops.ok() && !ops->empty()) {
      EXPECT_EQ(ops->front().op.rfind("LinearAddInto", 0) == 0, want_add_fused) << what << ": ran " << ops->front().op;
    }
    gpu.mutable_options().fuse_decode_ops = false;
    st = gpu.LinearAddInto(rows, w, res_apart.t, delta.t);
    EXPECT_TRUE(st.ok()) << st << " " << what;
    const std::vector<float> a = Download(gpu, res_fused.t), b = Download(gpu, res_apart.t);
    differ = 0;
    for (size_t i = 0; i < a.size(); ++i) differ += !(a[i] == b[i]);
    EXPECT_EQ(differ, 0u) << what << ": " << differ << " of " << a.size() << " residuals differ from Linear + Add";
  }
  gpu.mutable_options().fuse_decode_ops = was;
  return got;
}

// One QKV projection with RoPE and the KV write (Backend::LinearQkvRope) of m tokens, heads and
// kv_heads of head_dim, for CheckFusedQkvRope.
struct QkvRopeCase {
  int m, heads, kv_heads, head_dim;
  bool norm, fp8_cache, qk_norm;
};

// Backend::LinearQkvRope of random x [m, K] through the QKV weight `w` on `gpu`, fused (its op
// label, one op, and FusesQkvRope where `want_fused`) and with the fusions off (the linear, then
// QkvRope: the kernels the CPU oracle is held to elsewhere): the query and both caches bit for
// bit (a token whose slot is skipped, positions up to 3000, caches poisoned first).
inline void CheckFusedQkvRope(CudaBackend& gpu, std::mt19937& rng, const LinearWeight& w, const QkvRopeCase& c,
                              bool want_fused, const std::string& what) {
  const DType dt = gpu.activation_dtype();
  const int d = c.head_dim;
  const int64_t k = w.in_features(), n = w.out_features(), blocks = 8, block_size = 16;
  const float eps = 1e-5f;
  std::vector<float> inv(d / 2);
  for (int i = 0; i < d / 2; ++i) inv[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / d));
  std::vector<int32_t> pos(c.m), slots(c.m);
  for (int i = 0; i < c.m; ++i) {
    pos[i] = static_cast<int32_t>(rng() % 3000);
    slots[i] = i == 1 ? -1 : static_cast<int32_t>((i * 37 + 5) % (blocks * block_size));
  }
  std::vector<float> xv = RandomVec(rng, c.m * k, -3.0f, 3.0f), nv = RandomVec(rng, k, 0.5f, 1.5f);
  std::vector<float> qnv = RandomVec(rng, d, 0.5f, 1.5f), knv = RandomVec(rng, d, 0.5f, 1.5f);
  OwnedTensor x = Upload(gpu, dt, {c.m, k}, xv), nw = Upload(gpu, dt, {k}, nv);
  OwnedTensor tinv = Upload(gpu, DType::kF32, {d / 2}, inv), tp = UploadI32(gpu, pos), ts = UploadI32(gpu, slots);
  OwnedTensor qn = Upload(gpu, dt, {d}, qnv), kn = Upload(gpu, dt, {d}, knv);
  OwnedTensor normed = MakeTensor(gpu, dt, {c.m, k}), qkv = MakeTensor(gpu, dt, {c.m, n});
  const DType cache_dt = c.fp8_cache ? DType::kF8E4M3 : dt;
  const Shape cache_shape{blocks, c.kv_heads, block_size, d};
  struct Outputs {
    OwnedTensor q, k, v;
  };
  const bool was = gpu.options().fuse_decode_ops;
  auto run = [&](bool fuse) {
    Outputs out{MakeTensor(gpu, dt, {c.m, int64_t{c.heads} * d}), MakeTensor(gpu, cache_dt, cache_shape),
                MakeTensor(gpu, cache_dt, cache_shape)};
    for (OwnedTensor* t : {&out.q, &out.k, &out.v}) Poison(gpu, t->t);
    QkvRopeArgs a;
    a.qkv = qkv.t;
    a.num_heads = c.heads;
    a.num_kv_heads = c.kv_heads;
    a.head_dim = d;
    if (c.qk_norm) {
      a.q_norm = qn.t;
      a.k_norm = kn.t;
    }
    a.norm_eps = eps;
    a.rope.inv_freq = tinv.t;
    a.rope.rotary_dim = d;
    a.positions = tp.t;
    a.slot_mapping = ts.t;
    a.cache = {out.k.t, out.v.t, 0.02f, 0.011f};
    a.q_out = out.q.t;
    gpu.mutable_options().fuse_decode_ops = fuse;
    EXPECT_EQ(gpu.FusesQkvRope(w, a, c.m), fuse && want_fused) << what;
    gpu.StartOpTiming();
    const absl::Status st = gpu.LinearQkvRope(x.t, c.norm ? nw.t : Tensor(), eps, normed.t, w, a);
    EXPECT_TRUE(st.ok()) << st << " " << what;
    auto ops = gpu.CollectOpTimings();
    EXPECT_TRUE(ops.ok() && !ops->empty()) << what;
    if (fuse && ops.ok() && !ops->empty()) {
      EXPECT_EQ(ops->front().op.find("QkvRope") != std::string::npos && ops->size() == 1, want_fused)
          << what << ": ran " << ops->front().op << ", " << ops->size() << " ops";
    }
    return out;
  };
  Outputs fused = run(true), apart = run(false);
  gpu.mutable_options().fuse_decode_ops = was;
  auto bytes = [&](Tensor t) {
    std::vector<uint8_t> v(t.bytes());
    EXPECT_TRUE(gpu.CopyToHost(v.data(), t).ok());
    EXPECT_TRUE(gpu.Synchronize().ok());
    return v;
  };
  for (auto [a, b, name] : {std::tuple{&fused.q, &apart.q, "q"}, std::tuple{&fused.k, &apart.k, "k"},
                            std::tuple{&fused.v, &apart.v, "v"}}) {
    const std::vector<uint8_t> ab = bytes(a->t), bb = bytes(b->t);
    EXPECT_EQ(0, std::memcmp(ab.data(), bb.data(), ab.size())) << what << ": " << name << " differs";
  }
}

}  // namespace llm::testing
