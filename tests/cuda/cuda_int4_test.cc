// The int4 (W4A16) paths of the CUDA backend against the CPU oracle on the same repacked weights:
//  - Linear with int4 weights in the layout of engine/core/storage_format.h, built here with
//    every feature the loader can produce (zero points or not, groups of 32 to whole rows, odd
//    group counts, act-order permutations with padding columns), on many shapes including partial
//    tiles and units of the layout and of every kernel, each kernel form (the tensor-core GEMV in
//    registers and through bulk-copied stages, the widened GEMM, the 4-bit tensor-core GEMM at
//    every row count, the warpgroup GEMM), bf16 and fp16, float32 and 16-bit outputs,
//    eagerly and replayed from a CUDA graph. Which kernel ran is read from the op timing's label.
//  - The 4-bit fixtures teacher-forced on a bf16 GPU, held to the CPU emulation of a bf16 engine
//    on the same weights (rounding_backend.h).
//  - --quantization int4 dummy weights drawn on the GPU against the host's draw.
// Without a GPU the binary exits 77 (skipped).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <random>
#include <tuple>

#include "engine/core/int4_layout.h"
#include "engine/model/dummy_weights.h"
#include "engine/runtime/model_runner.h"
#include "kernels/cuda/gemm/gemv_w4a16_mma.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/runtime/fixture_reference.h"
#include "tests/runtime/rounding_backend.h"

namespace llm {
namespace {

using testing::Download;
using testing::MakeTensor;
using testing::OwnedTensor;
using testing::Poison;
using testing::RandomVec;
using testing::RelErr;
using testing::RoundTo;
using testing::Tolerance;
using testing::Upload;

// An int4 weight in the repacked layout, on the host.
struct HostInt4 {
  int64_t n = 0, k = 0, kp = 0, groups = 0;
  std::vector<uint8_t> codes;        // [n, kp / 2]
  std::vector<float> scales;         // [n, groups], fp16 values
  std::vector<uint8_t> zeros;        // [n, groups] or empty
  std::vector<int32_t> chunk_group;  // [kp / 32]
  std::vector<int32_t> perm;         // [kp] or empty
};

// `group`: columns per group in column order (0: one group); with `act_order`, the k columns are
// shuffled into groups of uneven sizes, each padded to whole chunks, as a row-parallel slice of an
// act-order checkpoint is.
HostInt4 MakeInt4(std::mt19937& rng, int64_t n, int64_t k, int64_t group, bool zeros, bool act_order) {
  HostInt4 w;
  w.n = n;
  w.k = k;
  if (!act_order) {
    const int64_t g = group > 0 ? group : k;
    w.kp = k;
    w.groups = k / g;
    for (int64_t c = 0; c < k / 32; ++c) w.chunk_group.push_back(static_cast<int32_t>(c * 32 / g));
  } else {
    std::vector<int32_t> cols(k);
    std::iota(cols.begin(), cols.end(), 0);
    std::shuffle(cols.begin(), cols.end(), rng);
    size_t at = 0;
    while (at < cols.size()) {
      const size_t take = std::min<size_t>(cols.size() - at, 1 + rng() % 80);
      const int32_t g = static_cast<int32_t>(w.groups++);
      for (size_t i = 0; i < take; ++i) w.perm.push_back(cols[at + i]);
      while (w.perm.size() % 32 != 0) w.perm.push_back(-1);
      while (w.chunk_group.size() < w.perm.size() / 32) w.chunk_group.push_back(g);
      at += take;
    }
    w.kp = static_cast<int64_t>(w.perm.size());
  }
  std::uniform_int_distribution<int> byte(0, 255), zero(0, 16);
  std::uniform_real_distribution<float> scale(0.002f, 0.03f);
  w.codes.resize(n * w.kp / 2);
  for (uint8_t& b : w.codes) b = static_cast<uint8_t>(byte(rng));
  for (int64_t i = 0; i < n * w.groups; ++i) {
    w.scales.push_back(Fp16ToFloat(FloatToFp16(scale(rng))));
    if (zeros) w.zeros.push_back(static_cast<uint8_t>(zero(rng)));
  }
  return w;
}

// Shapes for the GEMMs that take regular groups (whole 128-column units in column order): narrow
// and wide N, long K (stream-K ranges that split tiles between blocks), groups of one to four units
// and whole rows, zero points or none.
struct RegularGroupsCase {
  int64_t n, k, group;
  bool zeros;
};
constexpr RegularGroupsCase kRegularGroupsCases[] = {{16, 128, 128, true},     {144, 640, 128, false},
                                                     {1024, 4096, 128, true},  {304, 14336, 128, false},
                                                     {4096, 1024, 256, true},  {496, 1536, 512, false},
                                                     {256, 2048, 0, true}};

// Act-order in groups of 128 storage columns (each group's columns gathered from anywhere in K):
// the input is permuted into storage order first, the groups are regular.
HostInt4 MakeActOrderInRegularGroups(std::mt19937& rng) {
  HostInt4 w = MakeInt4(rng, 512, 1024, 128, true, false);
  w.perm.resize(1024);
  std::iota(w.perm.begin(), w.perm.end(), 0);
  std::shuffle(w.perm.begin(), w.perm.end(), rng);
  return w;
}

// The weight's tensors on one backend (scales in `scale_dtype`, the bias in `act`).
struct DeviceInt4 {
  OwnedTensor codes, scales, zeros, groups, perm, bias;
  LinearWeight lw;
};

DeviceInt4 Place(Backend& b, DType act, DType scale_dtype, const HostInt4& w, const std::vector<float>& bias) {
  DeviceInt4 d;
  d.codes = MakeTensor(b, DType::kU8, {w.n, w.kp / 2});
  EXPECT_TRUE(b.CopyToDevice(d.codes.t, w.codes.data()).ok());
  d.scales = Upload(b, scale_dtype, {w.n, w.groups}, w.scales);
  d.groups = MakeTensor(b, DType::kI32, {w.kp / 32});
  EXPECT_TRUE(b.CopyToDevice(d.groups.t, w.chunk_group.data()).ok());
  d.lw.weight = d.codes.t;
  d.lw.scale = d.scales.t;
  d.lw.chunk_group = d.groups.t;
  d.lw.format = StorageFormat::Int4(!w.zeros.empty(), scale_dtype);
  d.lw.int4_in_features = w.k;
  d.lw.int4_group_chunks = Int4GroupChunks(w.chunk_group.data(), static_cast<int64_t>(w.chunk_group.size()));
  if (!w.zeros.empty()) {
    d.zeros = MakeTensor(b, DType::kU8, {w.n, w.groups});
    EXPECT_TRUE(b.CopyToDevice(d.zeros.t, w.zeros.data()).ok());
    d.lw.zero = d.zeros.t;
  }
  if (!w.perm.empty()) {
    d.perm = MakeTensor(b, DType::kI32, {w.kp});
    EXPECT_TRUE(b.CopyToDevice(d.perm.t, w.perm.data()).ok());
    d.lw.input_perm = d.perm.t;
  }
  if (!bias.empty()) {
    d.bias = Upload(b, act, {w.n}, bias);
    d.lw.bias = d.bias.t;
  }
  EXPECT_TRUE(b.Synchronize().ok());
  return d;
}

class CudaInt4Test : public testing::CudaAgainstCpuTest {
 protected:
  CudaInt4Test() : CudaAgainstCpuTest(777) {}

  // Runs an int4 Linear on the GPU (kernel label from the op timing) and on the CPU oracle.
  void CheckLinear(const std::string& what, int64_t m, const HostInt4& w, bool with_bias, DType out_dtype) {
    const std::vector<float> x = Rand(m * w.k, -2.0f, 2.0f);
    const std::vector<float> bias = with_bias ? Rand(w.n) : std::vector<float>{};
    DeviceInt4 g = Place(*gpu_, dtype_, DType::kF16, w, bias);
    DeviceInt4 h = Place(cpu_, DType::kF32, DType::kF32, w, bias);
    ASSERT_TRUE(h.lw.ValidateInt4("test").ok()) << h.lw.ValidateInt4("test");
    OwnedTensor gx = Upload(*gpu_, dtype_, {m, w.k}, x), hx = Upload(cpu_, DType::kF32, {m, w.k}, x);
    OwnedTensor gout = MakeTensor(*gpu_, out_dtype, {m, w.n});
    Poison(*gpu_, gout.t);
    OwnedTensor want = MakeTensor(cpu_, DType::kF32, {m, w.n});
    ASSERT_TRUE(cpu_.Linear(hx.t, h.lw, want.t).ok());
    gpu_->StartOpTiming();
    const absl::Status st = gpu_->Linear(gx.t, g.lw, gout.t);
    ASSERT_TRUE(st.ok()) << st << " " << what;
    auto ops = gpu_->CollectOpTimings();
    ASSERT_TRUE(ops.ok() && !ops->empty());
    const std::string kernel = ops->back().op;
    ASSERT_NE(kernel.find("w4a16"), std::string::npos) << kernel;
    const std::vector<float> got = Download(*gpu_, gout.t);
    EXPECT_LE(RelErr(got, Download(cpu_, want.t)), Tolerance(out_dtype == DType::kF32 ? dtype_ : out_dtype))
        << what << " via " << kernel;
    ++kernels_seen_[kernel.substr(kernel.find("w4a16"))];
  }

  // Linear twice into fresh (poisoned) outputs: equal bit for bit (straddling tiles summed in a
  // fixed order, counters left zero between calls).
  void ExpectRepeatsBitForBit(const Tensor& x, const LinearWeight& w, int64_t m, int64_t n) {
    std::vector<float> first;
    for (int call = 0; call < 2; ++call) {
      OwnedTensor out = MakeTensor(*gpu_, dtype_, {m, n});
      Poison(*gpu_, out.t);
      ASSERT_TRUE(gpu_->Linear(x, w, out.t).ok());
      if (call == 0) first = Download(*gpu_, out.t);
      else EXPECT_EQ(Download(*gpu_, out.t), first) << m << " rows: the second call differs from the first";
    }
  }

  std::map<std::string, int> kernels_seen_;
};

TEST_P(CudaInt4Test, LinearEveryLayoutShapeAndKernel) {
  struct Case {
    int64_t m, n, k, group;
  };
  // Partial tiles: n off multiples of 8, 64 and 128; m off 16, 64 and 128; K of odd group counts
  // (96 = 3 x 32, 160 = 5 x 32, 448 = 7 x 64); the 8B shapes; short last tiles (16 rows) and units
  // (4 chunks) of the layout.
  const Case cases[] = {{1, 256, 256, 128},  {2, 384, 512, 128},  {3, 200, 384, 128},  {4, 1024, 4096, 128},
                        {5, 130, 256, 32},   {8, 512, 1024, 64},  {1, 8, 96, 32},      {7, 24, 160, 32},
                        {16, 320, 128, 0},   {33, 100, 448, 64},  {64, 192, 448, 64},  {65, 264, 1024, 128},
                        {128, 1000, 4096, 128}, {200, 448, 192, 32}, {257, 136, 2048, 128}, {1, 6144, 4096, 128},
                        {2, 4096, 14336, 128}, {16, 4096, 14336, 128}, {512, 4096, 4096, 128}, {1024, 4100, 512, 128},
                        {3, 4232, 448, 64}};  // 265 tiles: the GEMV's wide form, a short last tile and unit
  for (const Case& c : cases) {
    for (int layout = 0; layout < 3; ++layout) {  // 0: symmetric; 1: zero points; 2: act-order with zero points
      const HostInt4 w = MakeInt4(rng_, c.n, c.k, c.group, layout >= 1, layout == 2);
      for (int variant = 0; variant < 2; ++variant) {
        // 0: defaults (the tensor-core GEMV up to 32 rows, then the dequantizing GEMM); 1: no GEMV
        // (the dequantizing GEMM at every row count).
        CudaBackendOptions& o = gpu_->mutable_options();
        o.gemv_max_rows = variant == 1 ? 0 : 4;
        const DType out = (c.n + variant) % 4 == 0 ? DType::kF32 : dtype_;
        const std::string what = absl::StrCat(c.m, "x", c.n, "x", c.k, " group ", c.group, " layout ", layout,
                                              " variant ", variant, " out ", std::string(DTypeName(out)));
        CheckLinear(what, c.m, w, (c.n + variant) % 3 == 0, out);
      }
    }
  }
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
  for (const auto& [kernel, count] : kernels_seen_) std::printf("[int4 linear] %-18s %d calls\n", kernel.c_str(), count);
  for (const char* k : {"w4a16 mma gemv", "w4a16 dequant gemm"})
    EXPECT_GT(kernels_seen_[k], 0) << k << " never ran";
}

// Captured in a graph and replayed after new inputs are written: the same outputs as eager runs.
// The gate/up projection and SiLU-and-mul in one kernel (Backend::LinearSiluMul): the int4
// tensor-core GEMV's gate/up form (a block's gate tiles and the up tiles of the same columns) at
// 1-16 rows, groups in column order and act-order (x permuted first), with and without zeros:
// bit for bit what Linear then SiluMul give, and near the CPU's float32. Where the fused form
// would split K otherwise than the plain call (F's tiles not a whole number of pairs at the plain
// call's warps a tile; one tile a block at 8 warps a tile: 1792 x 4096) and where F is not a
// multiple of 16, it runs unfused.
TEST_P(CudaInt4Test, LinearSiluMulFusedInTheGemv) {
  struct Case {
    int64_t f, k, group;
    bool zeros, act_order, fused;
  };
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  // The last: 2F very wide (8 tiles an SM), x in fragment order at 8 and 16 rows.
  const Case cases[] = {
      {64, 256, 128, true, false, true},     {128, 512, 32, false, false, true},
      {96, 384, 0, true, false, false},      {1792, 1024, 128, true, false, true},
      {1792, 4096, 128, true, false, false}, {64, 320, 0, true, true, true},
      {40, 256, 128, true, false, false},    {int64_t{64} * sms, 256, 128, true, false, true}};
  for (const Case& c : cases)
    for (int64_t m : {1, 3, 8, 16}) {
      const int64_t n = 2 * c.f;
      const HostInt4 w = MakeInt4(rng_, n, c.k, c.group, c.zeros, c.act_order);
      const std::vector<float> x = Rand(m * c.k, -2.0f, 2.0f), bias = Rand(n);
      DeviceInt4 g = Place(*gpu_, dtype_, DType::kF16, w, bias);
      DeviceInt4 h = Place(cpu_, DType::kF32, DType::kF32, w, bias);
      OwnedTensor gx = Upload(*gpu_, dtype_, {m, c.k}, x), hx = Upload(cpu_, DType::kF32, {m, c.k}, x);
      const std::string what = "m " + std::to_string(m) + " F " + std::to_string(c.f) + " K " + std::to_string(c.k) +
                               " group " + std::to_string(c.group) + (c.zeros ? " zeros" : "") +
                               (c.act_order ? " act-order" : "");
      const std::vector<float> got = testing::CheckLinearSiluMul(*gpu_, gx.t, g.lw, m, c.fused, what);
      OwnedTensor hscratch = MakeTensor(cpu_, DType::kF32, {m, n}), hout = MakeTensor(cpu_, DType::kF32, {m, c.f});
      ASSERT_TRUE(cpu_.LinearSiluMul(hx.t, h.lw, hscratch.t, hout.t).ok());
      EXPECT_LE(RelErr(got, Download(cpu_, hout.t)), 2 * Tolerance(dtype_)) << what;
    }
}

// The decode GEMV forms its input's RMSNorm itself and adds its output into the residual
// (Backend::RmsNormLinear, LinearAddInto): the int4 tensor-core GEMV's register form at 1-8 rows
// (each block stages the norm) and at 9-32 rows (the kernel that rewrites x in fragment order forms
// the norm; the GEMV adds), regular and irregular weights (N not a multiple of 16, groups of 32,
// one group; the norm staged after the chunk groups), with and without zeros, with and without the
// gate/up form (up to 16 rows; at 17-32 rows the plain GEMV takes the norm and SiluMul runs
// apart): bit for bit what the norm kernel then Linear (Linear then Add) give, and near the CPU's
// float32. Act-order weights (x permuted first) and norms too large to
// stage (8 rows of 4096) run apart.
TEST_P(CudaInt4Test, NormAndResidualFusedInTheGemv) {
  struct Case {
    int64_t n, k, group, m;
    bool zeros, act_order, glu, norm_fused, add_fused;
  };
  const Case cases[] = {{512, 4096, 128, 1, true, false, false, true, true},
                        {200, 1024, 128, 3, true, false, false, true, true},
                        {256, 512, 32, 8, false, false, false, true, true},
                        {384, 384, 0, 2, true, false, false, true, true},
                        {3584, 1024, 128, 1, true, false, true, true, true},
                        {512, 4096, 128, 4, false, false, false, true, true},
                        {512, 4096, 128, 8, true, false, false, false, true},
                        {256, 320, 0, 1, true, true, false, false, false},
                        {256, 1024, 128, 16, true, false, false, true, true},
                        {512, 4096, 128, 9, false, false, false, true, true},
                        {200, 1024, 128, 12, true, false, false, true, true},
                        {256, 512, 32, 32, false, false, false, true, true},
                        {384, 384, 0, 20, true, false, false, true, true},
                        {3584, 1024, 128, 16, true, false, true, true, true},
                        {1024, 4096, 128, 24, true, false, false, true, true},
                        {3584, 1024, 128, 24, true, false, true, true, true},
                        {256, 1024, 128, 16, true, true, false, false, false}};
  const float eps = 1e-6f;
  for (const Case& c : cases) {
    const HostInt4 w = MakeInt4(rng_, c.n, c.k, c.group, c.zeros, c.act_order);
    const std::vector<float> x = Rand(c.m * c.k, -3.0f, 3.0f), bias = Rand(c.n), nw = Rand(c.k, 0.5f, 1.5f);
    DeviceInt4 g = Place(*gpu_, dtype_, DType::kF16, w, bias);
    DeviceInt4 h = Place(cpu_, DType::kF32, DType::kF32, w, bias);
    OwnedTensor gx = Upload(*gpu_, dtype_, {c.m, c.k}, x), hx = Upload(cpu_, DType::kF32, {c.m, c.k}, x);
    OwnedTensor gn = Upload(*gpu_, dtype_, {c.k}, nw), hn = Upload(cpu_, DType::kF32, {c.k}, nw);
    const std::string what = "m " + std::to_string(c.m) + " N " + std::to_string(c.n) + " K " + std::to_string(c.k) +
                             " group " + std::to_string(c.group) + (c.zeros ? " zeros" : "") +
                             (c.act_order ? " act-order" : "") + (c.glu ? " gate/up" : "");
    const std::vector<float> got =
        testing::CheckFusedNormAndResidual(*gpu_, gx.t, gn.t, eps, g.lw, c.m, c.glu, c.norm_fused, c.add_fused, what);
    const int64_t out_cols = c.glu ? c.n / 2 : c.n;
    OwnedTensor hnormed = MakeTensor(cpu_, DType::kF32, {c.m, c.k}), hout = MakeTensor(cpu_, DType::kF32, {c.m, c.n});
    OwnedTensor hact = MakeTensor(cpu_, DType::kF32, {c.m, out_cols});
    ASSERT_TRUE(cpu_.RmsNormLinear(hx.t, hn.t, eps, hnormed.t, h.lw, hout.t, c.glu ? hact.t : Tensor()).ok());
    EXPECT_LE(RelErr(got, Download(cpu_, (c.glu ? hact : hout).t)), 2 * Tolerance(dtype_)) << what;
  }
}

// The QKV projection's end as RoPE and the KV write (Backend::LinearQkvRope) in the int4
// tensor-core GEMV's register form (a block's tiles pair whole halves of heads): 1-8 rows, with and
// without its input's norm, 16-bit and E4M3 caches, head_dim 64 and 128: the query and caches bit
// for bit what the linear then QkvRope write. Q/K norms, act-order weights, 16 rows and splits of K
// whose blocks would not hold whole halves of heads (64 x 512: four tiles a block, two a half head;
// K 4096 at 1,536 rows: 8 warps a tile, one tile a block, as the 8B projection) run apart.
TEST_P(CudaInt4Test, QkvRopeFusedInTheGemv) {
  struct Case {
    int m, head_dim, k;
    bool norm, fp8_cache, qk_norm, act_order, fused;
  };
  const Case cases[] = {{1, 128, 1024, true, true, false, false, true},  {3, 128, 1024, false, false, false, false, true},
                        {8, 64, 2048, false, true, false, false, true},  {2, 64, 2048, true, false, false, false, true},
                        {1, 128, 4096, true, true, false, false, false},
                        {8, 64, 512, false, true, false, false, false},  {1, 128, 1024, true, false, true, false, false},
                        {1, 128, 320, false, false, false, true, false}, {16, 128, 1024, false, true, false, false, false}};
  const int heads = 8, kv_heads = 2;
  for (const Case& c : cases) {
    const int64_t n = int64_t{heads + 2 * kv_heads} * c.head_dim;
    const HostInt4 w = MakeInt4(rng_, n, c.k, c.act_order ? 0 : 128, true, c.act_order);
    DeviceInt4 g = Place(*gpu_, dtype_, DType::kF16, w, Rand(n));
    testing::QkvRopeCase rc{c.m, heads, kv_heads, c.head_dim, c.norm, c.fp8_cache, c.qk_norm};
    testing::CheckFusedQkvRope(*gpu_, rng_, g.lw, rc, c.fused,
                               "m " + std::to_string(c.m) + " head_dim " + std::to_string(c.head_dim) + " K " +
                                   std::to_string(c.k) + (c.norm ? " norm" : "") + (c.fp8_cache ? " e4m3 cache" : "") +
                                   (c.qk_norm ? " q/k norms" : "") + (c.act_order ? " act-order" : ""));
  }
}

TEST_P(CudaInt4Test, LinearReplayedFromAGraph) {
  for (int64_t m : {1, 2, 4, 16, 32, 128}) {
    for (bool act_order : {false, true}) {
      const HostInt4 w = MakeInt4(rng_, 512, 1024, 128, true, act_order);
      DeviceInt4 g = Place(*gpu_, dtype_, DType::kF16, w, Rand(512));
      OwnedTensor gx = Upload(*gpu_, dtype_, {m, 1024}, Rand(m * 1024)), out = MakeTensor(*gpu_, dtype_, {m, 512}),
                  eager = MakeTensor(*gpu_, dtype_, {m, 512});
      ASSERT_TRUE(gpu_->Linear(gx.t, g.lw, out.t).ok());
      ASSERT_TRUE(gpu_->BeginCapture().ok());
      ASSERT_TRUE(gpu_->Linear(gx.t, g.lw, out.t).ok());
      auto graph = gpu_->EndCapture();
      ASSERT_TRUE(graph.ok()) << graph.status();
      for (int round = 0; round < 3; ++round) {
        const std::vector<float> x = Rand(m * 1024);
        ASSERT_TRUE(gpu_->UploadConverted(x.data(), DType::kF32, gx.t).ok());
        Poison(*gpu_, out.t);
        ASSERT_TRUE((*graph)->Replay().ok());
        ASSERT_TRUE(gpu_->Linear(gx.t, g.lw, eager.t).ok());
        EXPECT_EQ(Download(*gpu_, out.t), Download(*gpu_, eager.t)) << m << " rows, act-order " << act_order;
      }
    }
  }
}

// Act-order inputs larger than the workspace are permuted and multiplied a chunk of rows at a time.
TEST_P(CudaInt4Test, ActOrderInRowChunks) {
  CudaBackendOptions o;
  o.fp8_workspace_bytes = 64 << 10;  // 32 rows of 1024 storage columns a chunk
  gpu_ = testing::MakeCuda(dtype_, o);
  ASSERT_NE(gpu_, nullptr);
  const HostInt4 w = MakeInt4(rng_, 256, 1000, 0, true, true);
  CheckLinear("chunked act-order", 333, w, true, dtype_);
  const HostInt4 ragged = MakeInt4(rng_, 200, 1000, 0, true, true);  // a short last tile of the layout
  CheckLinear("chunked act-order, 200 rows", 333, ragged, false, dtype_);
  EXPECT_GT(kernels_seen_["w4a16 gemm"], 0) << "a workspace this small holds no widened slice: the 4-bit GEMM";
}

// The tensor-core GEMV on every row count it takes, with groups of 32 and act-order (units whose
// chunks span groups: the masked passes), partial 16-row tiles and K off multiples of 128, and a
// very wide weight (8 tiles an SM: its own shapes at 1-16 rows, x in fragment order from 5).
TEST_P(CudaInt4Test, MmaGemvAtEveryRowCount) {
  struct Case {
    int64_t n, k, group;
    bool zeros, act_order;
  };
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  const Case cases[] = {{520, 2048, 128, true, false},
                        {72, 1056, 32, false, false},
                        {300, 800, 0, true, true},
                        {int64_t{8} * 16 * sms, 384, 128, true, false}};
  for (const Case& cs : cases) {
    const HostInt4 w = MakeInt4(rng_, cs.n, cs.k, cs.group, cs.zeros, cs.act_order);
    for (int64_t m = 1; m <= 32; m += m < 10 ? 1 : 7) {
      CheckLinear(absl::StrCat(m, " rows, ", cs.n, "x", cs.k, " group ", cs.group), m, w, m % 2 == 0,
                  m % 3 == 0 ? DType::kF32 : dtype_);
    }
  }
  EXPECT_GT(kernels_seen_["w4a16 mma gemv"], 0);
}

// The few-rows GEMM on int4 weights (gemm_few_rows.h) at every token-tile count it has (1 to 128
// rows), both step widths, one or two warps a tile, groups of one to four units and whole rows, zero
// points or none, act-order inputs in regular groups, shapes whose stream-K ranges split tiles
// between blocks (narrow N, long K) and bias or none: against the CPU oracle, and each call run
// twice equal bit for bit (straddling tiles summed in a fixed order, counters left zero).
TEST_P(CudaInt4Test, FewRowsGemmEveryRowCountAndShape) {
  CudaBackendOptions& o = gpu_->mutable_options();
  o.gemm_few_rows_int4_min_rows = 1;
  o.gemm_w4a16_wgmma_min_rows = o.gemm_w4a16_wgmma_max_rows + 1;  // off
  for (const RegularGroupsCase& cs : kRegularGroupsCases) {
    const HostInt4 w = MakeInt4(rng_, cs.n, cs.k, cs.group, cs.zeros, false);
    for (const int64_t m : {1, 9, 16, 17, 40, 64, 65, 128}) {
      // (tile rows, step columns, warps an m16 tile from 33 rows): every form (256-row tiles are
      // asked for and not taken with int4 weights).
      for (const auto& [tile_rows, step_cols, split] :
           {std::tuple{128, 256, 1}, {128, 128, 1}, {256, 256, 1}, {128, 256, 2}, {128, 128, 2}}) {
        o.gemm_few_rows_tile_rows = tile_rows;
        o.gemm_few_rows_step_cols = step_cols;
        o.gemm_few_rows_token_split = split;
        const std::string what = absl::StrCat(m, " rows, ", cs.n, "x", cs.k, " group ", cs.group, " zeros ", cs.zeros,
                                              ", tile ", tile_rows, " step ", step_cols, " split ", split);
        const size_t before = kernels_seen_["w4a16 few-rows gemm"];
        CheckLinear(what, m, w, (m + cs.n / 16) % 2 == 1, dtype_);
        EXPECT_EQ(kernels_seen_["w4a16 few-rows gemm"], before + 1) << what;
      }
    }
  }
  // Act-order, in groups of 128 storage columns (each group's columns gathered from anywhere in
  // K): the input is permuted into storage order first, the groups are regular.
  const HostInt4 shuffled = MakeActOrderInRegularGroups(rng_);
  for (const int64_t m : {12, 100}) {
    const size_t before = kernels_seen_["w4a16 few-rows gemm"];
    CheckLinear(absl::StrCat(m, " rows, act-order in regular groups"), m, shuffled, true, dtype_);
    EXPECT_EQ(kernels_seen_["w4a16 few-rows gemm"], before + 1);
  }
  // Twice into fresh outputs, bit for bit (K = 14336 over 19 tiles: most tiles straddle blocks).
  const HostInt4 wide = MakeInt4(rng_, 304, 14336, 128, true, false);
  DeviceInt4 d = Place(*gpu_, dtype_, DType::kF16, wide, {});
  for (const int64_t m : {24, 128}) {
    OwnedTensor x = Upload(*gpu_, dtype_, {m, wide.k}, Rand(m * wide.k));
    ExpectRepeatsBitForBit(x.t, d.lw, m, wide.n);
  }
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

// The warpgroup GEMM on int4 weights (gemm_w4a16_wgmma.h) at 1 to 448 rows (every token width,
// one to four passes, partial token tiles), N off multiples of 128 (a block tile of fewer than
// eight layout tiles), groups of one to four units and whole rows, zero points or none, bias or
// none, act-order inputs in regular groups, and shapes whose stream-K ranges split tiles between
// blocks: against the CPU oracle; each call twice equal bit for bit, and replayed from a graph.
TEST_P(CudaInt4Test, WgmmaGemmEveryRowCountAndShape) {
  CudaBackendOptions& o = gpu_->mutable_options();
  o.gemm_w4a16_wgmma_min_rows = 1;
  o.gemm_w4a16_wgmma_max_rows = 448;
  for (const RegularGroupsCase& cs : kRegularGroupsCases) {
    const HostInt4 w = MakeInt4(rng_, cs.n, cs.k, cs.group, cs.zeros, false);
    for (const int64_t m : {1, 9, 64, 65, 128, 129, 200, 256, 448}) {
      const std::string what =
          absl::StrCat(m, " rows, ", cs.n, "x", cs.k, " group ", cs.group, " zeros ", cs.zeros);
      const size_t before = kernels_seen_["w4a16 wgmma gemm"];
      CheckLinear(what, m, w, (m + cs.n / 16) % 2 == 1, dtype_);
      EXPECT_EQ(kernels_seen_["w4a16 wgmma gemm"], before + 1) << what;
    }
  }
  const HostInt4 shuffled = MakeActOrderInRegularGroups(rng_);
  for (const int64_t m : {12, 100, 256}) {
    const size_t before = kernels_seen_["w4a16 wgmma gemm"];
    CheckLinear(absl::StrCat(m, " rows, act-order in regular groups"), m, shuffled, true, dtype_);
    EXPECT_EQ(kernels_seen_["w4a16 wgmma gemm"], before + 1);
  }
  // Twice into fresh outputs, bit for bit (K = 14336 over 3 tiles: most tiles straddle blocks),
  // then replayed from a graph with new inputs: equal to eager runs.
  const HostInt4 wide = MakeInt4(rng_, 304, 14336, 128, true, false);
  DeviceInt4 d = Place(*gpu_, dtype_, DType::kF16, wide, {});
  for (const int64_t m : {24, 128, 200}) {
    OwnedTensor x = Upload(*gpu_, dtype_, {m, wide.k}, Rand(m * wide.k));
    ExpectRepeatsBitForBit(x.t, d.lw, m, wide.n);
    OwnedTensor out = MakeTensor(*gpu_, dtype_, {m, wide.n}), eager = MakeTensor(*gpu_, dtype_, {m, wide.n});
    ASSERT_TRUE(gpu_->BeginCapture().ok());
    ASSERT_TRUE(gpu_->Linear(x.t, d.lw, out.t).ok());
    auto graph = gpu_->EndCapture();
    ASSERT_TRUE(graph.ok()) << graph.status();
    for (int round = 0; round < 2; ++round) {
      const std::vector<float> xv = Rand(m * wide.k);
      ASSERT_TRUE(gpu_->UploadConverted(xv.data(), DType::kF32, x.t).ok());
      Poison(*gpu_, out.t);
      ASSERT_TRUE((*graph)->Replay().ok());
      ASSERT_TRUE(gpu_->Linear(x.t, d.lw, eager.t).ok());
      EXPECT_EQ(Download(*gpu_, out.t), Download(*gpu_, eager.t)) << m << " rows, replay " << round;
    }
  }
  gpu_->mutable_options() = CudaBackendOptions{};
  gpu_->mutable_options().dtype = dtype_;
}

// The tensor-core GEMV's forms (codes straight to registers, or through shared-memory stages of
// every size, one or two tiles a warp) at a fixed K split sum in the same order: their outputs
// must agree bit for bit, on shapes with partial tiles, partial stages and masked passes, and one
// the register form's regular kernel takes (whole tiles and units, groups of two units).
TEST_P(CudaInt4Test, MmaGemvFormsAgreeExactly) {
  struct Case {
    int64_t n, k, group;
    bool zeros;
  };
  const Case cases[] = {{520, 2048, 128, true}, {72, 1056, 32, false}, {300, 800, 0, true}, {40, 4096, 128, false},
                        {256, 2048, 256, true}};
  int device = 0, sms = 0;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  for (const Case& cs : cases) {
    const HostInt4 w = MakeInt4(rng_, cs.n, cs.k, cs.group, cs.zeros, false);
    DeviceInt4 d = Place(*gpu_, dtype_, DType::kF16, w, {});
    cuda::W4A16Weights wd;
    wd.codes = static_cast<const uint8_t*>(d.codes.t.data());
    wd.scales = d.scales.t.data();
    wd.zeros = cs.zeros ? static_cast<const uint8_t*>(d.zeros.t.data()) : nullptr;
    wd.chunk_group = static_cast<const int32_t*>(d.groups.t.data());
    wd.groups = w.groups;
    wd.group_chunks = d.lw.int4_group_chunks;
    for (const int64_t m : {1, 3, 8, 9, 16, 17, 32}) {
      OwnedTensor x = Upload(*gpu_, dtype_, {m, w.kp}, Rand(m * w.kp, -2.0f, 2.0f));
      for (const int wpt : {1, 2, 8}) {
        auto run = [&](const cuda::GemvW4A16MmaOptions& o) {
          OwnedTensor out = MakeTensor(*gpu_, DType::kF32, {m, w.n});
          Poison(*gpu_, out.t);
          EXPECT_TRUE(gpu_->Synchronize().ok());
          const absl::Status st = cuda::LaunchGemvW4A16Mma(dtype_, DType::kF32, x.t.data(), wd, nullptr, out.t.data(),
                                                           m, w.n, w.kp, sms, o, nullptr);
          EXPECT_TRUE(st.ok()) << st;
          EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          return Download(*gpu_, out.t);
        };
        cuda::GemvW4A16MmaOptions reg;
        reg.form = cuda::GemvW4A16MmaOptions::Form::kRegisters;
        reg.warps_per_tile = wpt;
        const std::vector<float> want = run(reg);
        {  // x in fragment order first (5-32 rows), then the same sums
          cuda::GemvW4A16MmaOptions frag = reg;
          OwnedTensor ws = MakeTensor(
              *gpu_, DType::kU8, {static_cast<int64_t>(cuda::GemvW4A16MmaXWorkspaceBytes(m, w.kp)) + 16});
          Poison(*gpu_, ws.t);
          frag.x_workspace = ws.t.data();
          frag.x_workspace_bytes = cuda::GemvW4A16MmaXWorkspaceBytes(m, w.kp);
          EXPECT_EQ(frag.x_workspace_bytes > 0, m >= 5) << m;
          const std::vector<float> got = run(frag);
          int64_t bad = 0;
          for (size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i];
          EXPECT_EQ(bad, 0) << m << " rows, " << cs.n << "x" << cs.k << " group " << cs.group << ", wpt "
                            << wpt << ", x in fragment order";
        }
        for (const int tpw : {1, 2})
          for (const int chunks : {8, 16, 32})
            for (const int stages : {1, 2, 3}) {
              cuda::GemvW4A16MmaOptions o;
              o.form = cuda::GemvW4A16MmaOptions::Form::kBulk;
              o.warps_per_tile = wpt;
              o.tiles_per_warp = tpw;
              o.stage_chunks = chunks;
              o.stages = stages;
              const std::vector<float> got = run(o);
              int64_t bad = 0;
              for (size_t i = 0; i < want.size(); ++i) bad += got[i] != want[i];
              EXPECT_EQ(bad, 0) << m << " rows, " << cs.n << "x" << cs.k << " group " << cs.group << ", wpt " << wpt
                                << " tiles " << tpw << " stage chunks " << chunks << " stages " << stages;
            }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaInt4Test, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const auto& info) { return testing::DTypeLabel(info.param); });

// --- whole models ---

// The 4-bit fixtures on a bf16 GPU, teacher-forced, against the references, held to the CPU
// emulation of a bf16 engine on the same int4 weights (activations, cache and outputs rounded
// where the GPU stores them; the weights exact, as the GEMV keeps them, or widened to bf16, as the
// widened GEMM of longer inputs rounds them), with the margins cuda_fp8_test gives its emulation.
class CudaInt4FixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(CudaInt4FixtureTest, TeacherForcedWithinTheEmulationsBand) {
  const std::string name = GetParam();
  const std::string dir = testing::ModelDir(name);
  auto config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  ModelRunnerOptions options = testing::ParityRunnerOptions();
  CpuBackendOptions cpu;
  cpu.num_threads = 0;
  cpu.int4_fp16_scales = true;  // the GPU's storage
  const unsigned points = testing::kRoundAll & ~testing::kRoundWeights;
  auto emulated_runner = ModelRunner::Create(
      *config, **ckpt, std::make_unique<testing::RoundingBackend>(DType::kBF16, points, config->vocab_size, true, cpu),
      nullptr, options);
  ASSERT_TRUE(emulated_runner.ok()) << emulated_runner.status();
  auto emulated = testing::TeacherForcedParity(**emulated_runner, name);
  ASSERT_TRUE(emulated.ok()) << emulated.status();
  // Linears of more than kGemvW4A16MmaMaxRows rows (the longer prompts here) take the widened
  // GEMM, which rounds each weight (code - zero) * scale to bf16 once: emulated by a backend that
  // takes no int4 weights, so the loader widens them and the rounding backend rounds them to bf16.
  // The GPU is held to the worse of the two emulations.
  auto widened_runner = ModelRunner::Create(
      *config, **ckpt, std::make_unique<testing::RoundingBackend>(DType::kBF16, testing::kRoundAll, config->vocab_size),
      nullptr, options);
  ASSERT_TRUE(widened_runner.ok()) << widened_runner.status();
  auto widened = testing::TeacherForcedParity(**widened_runner, name);
  ASSERT_TRUE(widened.ok()) << widened.status();
  CudaBackendOptions b;
  b.dtype = DType::kBF16;
  auto backend = CudaBackend::Create(b);
  ASSERT_TRUE(backend.ok()) << backend.status();
  options.kv_cache_dtype = DType::kBF16;
  auto runner = ModelRunner::Create(*config, **ckpt, std::move(*backend), nullptr, options);
  ASSERT_TRUE(runner.ok()) << runner.status();
  auto gpu = testing::TeacherForcedParity(**runner, name);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::printf(
      "[int4 parity] %-26s emulated: top-1 %.4f max %.3g mean %.3g | widened: top-1 %.4f max %.3g mean %.3g | GPU: "
      "top-1 %.4f max %.3g mean %.3g\n",
      name.c_str(), emulated->agreement(), emulated->max_err, emulated->mean_err(), widened->agreement(),
      widened->max_err, widened->mean_err(), gpu->agreement(), gpu->max_err, gpu->mean_err());
  EXPECT_LE(gpu->max_err, 1.25 * std::max(emulated->max_err, widened->max_err));
  EXPECT_LE(gpu->mean_err(), 1.2 * std::max(emulated->mean_err(), widened->mean_err()));
  EXPECT_GE(gpu->agreement(), std::min(emulated->agreement(), widened->agreement()) - 3.0 / gpu->positions);
}

INSTANTIATE_TEST_SUITE_P(Int4Fixtures, CudaInt4FixtureTest, ::testing::ValuesIn(testing::kInt4FixtureModels),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// --quantization int4 --dummy-weights: the GPU draws the same codes as the host (the same Philox
// stream truncated to bytes; where the GPU's fused multiply-add lands a draw across an integer,
// the neighbouring byte), and the same scales.
TEST(CudaInt4DummyWeightsTest, GpuDrawMatchesHostDraw) {
  auto config = LoadModelConfig(testing::ModelDir("llama-tiny"));
  ASSERT_TRUE(config.ok());
  LoadOptions int4;
  int4.quantization = OnlineQuantization::kInt4;
  auto gpu = testing::MakeCuda(DType::kBF16);
  ASSERT_NE(gpu, nullptr);
  CpuBackendOptions fp16;
  fp16.int4_fp16_scales = true;
  CpuBackend cpu(fp16);
  auto on_gpu = CreateDummyWeights(*config, ShardSpec{}, *gpu, 9, int4);
  auto on_cpu = CreateDummyWeights(*config, ShardSpec{}, cpu, 9, int4);
  ASSERT_TRUE(on_gpu.ok() && on_cpu.ok()) << on_gpu.status() << on_cpu.status();
  const LinearWeight& g = (*on_gpu)->layers[1].down;
  const LinearWeight& h = (*on_cpu)->layers[1].down;
  ASSERT_EQ(g.format, StorageFormat::Int4(false, DType::kF16));
  ASSERT_EQ(h.format, g.format);
  std::vector<uint8_t> bytes(g.weight.numel());
  ASSERT_TRUE(gpu->CopyToHost(bytes.data(), g.weight).ok());
  ASSERT_TRUE(gpu->Synchronize().ok());
  int neighbours = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int a = bytes[i], b = h.weight.data_as<uint8_t>()[i];
    if (a == b) continue;
    ++neighbours;
    EXPECT_LE(std::abs(a - b), 1) << i;
  }
  EXPECT_LE(neighbours, static_cast<int>(bytes.size() / 1000));
  EXPECT_EQ(Download(*gpu, g.scale), Download(cpu, h.scale));
}

}  // namespace
}  // namespace llm
