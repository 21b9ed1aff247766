// 4-bit (W4A16) checkpoints on the CPU oracle: every published packing (tests/data/models/*-w4-*)
// loads into the repacked int4 layout (engine/core/storage_format.h), sharded copies, GPTQ v2 and
// float16 scales give the same model, tensor-parallel slices hold exactly their rows and columns
// (act-order slices sorted and padded by group), splits that cut a group and malformed checkpoints
// fail with messages naming the layer or tensor and the scheme, and 4-bit dummy weights come in the
// layout a checkpoint would load into.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <set>

#include "engine/backend/cpu/cpu_backend.h"
#include "engine/core/int4_layout.h"
#include "engine/model/dummy_weights.h"
#include "engine/runtime/model_runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/model/test_files.h"
#include "tests/runtime/checkpoint_copy.h"
#include "tests/runtime/fixture_reference.h"
#include "tests/runtime/rounding_backend.h"

namespace llm {
namespace {

using ::testing::AllOf;
using testing::CheckpointCopy;
using ::testing::HasSubstr;
using testing::LoadCheckpointWeights;

absl::StatusOr<testing::LogitParity> Parity(const std::filesystem::path& dir, const std::string& name,
                                            CpuBackendOptions cpu = {2}) {
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(auto runner, ModelRunner::Create(config, *checkpoint, std::make_unique<CpuBackend>(cpu), nullptr,
                                                    testing::ParityRunnerOptions()));
  return testing::TeacherForcedParity(*runner, name);
}

// A linear's values [N, K] in input-column order.
std::vector<float> Values(const LinearWeight& w) {
  std::vector<float> out(static_cast<size_t>(w.out_features() * w.in_features()));
  if (!w.format.int4()) {
    std::memcpy(out.data(), w.weight.data(), out.size() * 4);
    return out;
  }
  DequantizeInt4(w.int4_view(), out.data());
  return out;
}

std::vector<int32_t> Ints(const Tensor& t) {
  const int32_t* p = t.data_as<const int32_t>();
  return std::vector<int32_t>(p, p + t.numel());
}

// --- the layout ---

// Column c of a 32-column chunk: 32-bit word c / 8, nibble (c % 8) / 2 + 4 (c % 2), so that
// (word >> 4s) & 0x000F000F holds the column pair (8w + 2s, 8w + 2s + 1) in its low and high
// halves (what an MMA fragment register holds; the CUDA kernels rely on it).
TEST(Int4LayoutTest, ChunkColumnsSitWhereTheMmaFragmentsReadThem) {
  const Int4Layout one_row{1, 64};  // one row: chunk c at 16c
  auto nibble = [&](int64_t col) { return (one_row.ByteOf(0, col) % 4) * 2 + Int4Layout::ShiftOf(col) / 4; };
  for (int64_t w = 0; w < 4; ++w)
    for (int64_t s = 0; s < 4; ++s) {
      const int64_t c = 8 * w + 2 * s;
      EXPECT_EQ(one_row.ByteOf(0, c) / 4, w) << c;  // word w
      EXPECT_EQ(nibble(c), s) << c;                  // the pair's low half
      EXPECT_EQ(one_row.ByteOf(0, c + 1) / 4, w) << c;
      EXPECT_EQ(nibble(c + 1), s + 4) << c;          // its high half
    }
  EXPECT_EQ(one_row.ByteOf(0, 0), 0);
  EXPECT_EQ(Int4Layout::ShiftOf(0), 0);
  EXPECT_EQ(one_row.ByteOf(0, 1), 2);  // nibble 4: byte 2, low
  EXPECT_EQ(Int4Layout::ShiftOf(1), 0);
  EXPECT_EQ(one_row.ByteOf(0, 2), 0);  // nibble 1: byte 0, high
  EXPECT_EQ(Int4Layout::ShiftOf(2), 4);
  EXPECT_EQ(one_row.ByteOf(0, 31), 15);  // word 3, nibble 7
  EXPECT_EQ(Int4Layout::ShiftOf(31), 4);
  EXPECT_EQ(one_row.ByteOf(0, 32 + 9), 16 + 4 + 2);  // chunk 1, word 1, nibble 4
}

// Chunks in the order a tensor-core GEMV warp loads them: 16-row tiles, each a run of 4-chunk
// units of 1 KB (row r's chunk j at 64r + 16j), short tiles and units packed without holes.
TEST(Int4LayoutTest, TilesOfUnitsInTheOrderAWarpLoadsThem) {
  const Int4Layout full{32, 256};  // 2 tiles x 2 units
  for (int64_t lane = 0; lane < 32; ++lane) {
    // One warp load: lane 4g + t reads chunk t of row g (rows 0-7) or of row g + 8.
    EXPECT_EQ(full.ChunkOffset(lane / 4, lane % 4), 16 * lane);
    EXPECT_EQ(full.ChunkOffset(8 + lane / 4, lane % 4), 512 + 16 * lane);
    EXPECT_EQ(full.ChunkOffset(lane / 4, 4 + lane % 4), 1024 + 16 * lane);   // the next unit
    EXPECT_EQ(full.ChunkOffset(16 + lane / 4, lane % 4), 2048 + 16 * lane);  // the next tile
  }
  // 20 rows x 6 chunks: tile 0 (16 rows) = unit 0 (16 x 4 chunks) + unit 1 (16 x 2 chunks);
  // tile 1 (4 rows) = unit 0 (4 x 4) + unit 1 (4 x 2).
  const Int4Layout ragged{20, 6 * 32};
  EXPECT_EQ(ragged.ChunkOffset(0, 4), 1024);
  EXPECT_EQ(ragged.ChunkOffset(3, 5), 1024 + (3 * 2 + 1) * 16);
  EXPECT_EQ(ragged.ChunkOffset(16, 0), 16 * 96);
  EXPECT_EQ(ragged.ChunkOffset(17, 3), 16 * 96 + (1 * 4 + 3) * 16);
  EXPECT_EQ(ragged.ChunkOffset(19, 5), 16 * 96 + 4 * 64 + (3 * 2 + 1) * 16);
  // Every (row, chunk) of some shapes owns a distinct 16-byte slot of the [n, kp / 2] bytes.
  for (const auto& [n, kv] : std::vector<std::pair<int64_t, int64_t>>{{20, 6}, {16, 4}, {7, 3}, {33, 9}, {1, 1}}) {
    const Int4Layout l{n, kv * 32};
    std::vector<int> seen(static_cast<size_t>(n * kv), 0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < kv; ++c) {
        const int64_t off = l.ChunkOffset(r, c);
        ASSERT_EQ(off % 16, 0);
        ASSERT_GE(off, 0);
        ASSERT_LT(off / 16, n * kv);
        ++seen[static_cast<size_t>(off / 16)];
      }
    for (int s : seen) EXPECT_EQ(s, 1) << n << " x " << kv;
  }
  std::vector<uint8_t> codes(20 * 6 * 16, 0);
  for (int64_t r = 0; r < 20; ++r)
    for (int64_t c = 0; c < 192; ++c) ragged.Set(codes.data(), r, c, static_cast<uint8_t>((r + c) % 16));
  for (int64_t r = 0; r < 20; ++r)
    for (int64_t c = 0; c < 192; ++c) EXPECT_EQ(ragged.Get(codes.data(), r, c), (r + c) % 16) << r << " " << c;
}

// The group-of-chunk rule a kernel may use instead of the map: only where it holds for every chunk.
TEST(Int4LayoutTest, GroupChunksOnlyWhereEveryChunkFollowsTheRule) {
  auto gc = [](std::vector<int32_t> m) { return Int4GroupChunks(m.data(), static_cast<int64_t>(m.size())); };
  EXPECT_EQ(gc({0, 0, 0, 0, 1, 1, 1, 1}), 4);
  EXPECT_EQ(gc({0, 0, 0, 0, 1, 1}), 4);           // a short last group
  EXPECT_EQ(gc({0, 1, 2, 3}), 1);
  EXPECT_EQ(gc({0, 0, 0, 0, 0, 0}), 6);           // one group
  EXPECT_EQ(gc({0, 0, 0, 1, 1, 1, 1, 2}), 0);     // act-order groups of unequal size
  EXPECT_EQ(gc({0, 0, 1, 1, 0, 0}), 0);
  // 512 columns in groups of 384 (a group size that does not divide K): chunks 0-11, 12-15. The
  // counts alone (16 chunks, 2 groups) would suggest 8 a group.
  std::vector<int32_t> odd(16, 0);
  for (int c = 12; c < 16; ++c) odd[static_cast<size_t>(c)] = 1;
  EXPECT_EQ(gc(odd), 12);
}

// --- formats ---

TEST(Int4LoadingTest, AwqKeepsItsZeroPointsInColumnOrderGroups) {
  CpuBackend cpu(2);
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-w4-awq"), cpu);
  ASSERT_TRUE(w.ok()) << w.status();
  const LayerWeights& l = (*w)->layers[1];
  EXPECT_EQ(l.qkv.format, StorageFormat::Int4(/*zero_points=*/true, DType::kF32));
  EXPECT_EQ(l.qkv.weight.shape(), Shape({128 + 2 * 64, 64}));  // K 128: 64 bytes a row
  EXPECT_EQ(l.qkv.in_features(), 128);
  EXPECT_EQ(l.qkv.scale.shape(), Shape({256, 4}));  // groups of 32
  EXPECT_EQ(l.qkv.zero.shape(), Shape({256, 4}));
  EXPECT_EQ(Ints(l.qkv.chunk_group), std::vector<int32_t>({0, 1, 2, 3}));
  EXPECT_TRUE(l.qkv.input_perm.empty());
  EXPECT_EQ(l.down.scale.shape(), Shape({128, 12}));
  EXPECT_EQ(l.gate_up.out_features(), 2 * 384);
  EXPECT_EQ((*w)->lm_head.format, StorageFormat::Float(DType::kF32));
  // AutoAWQ's order: output column 8j + c's zero is nibble [0, 4, 1, 5, 2, 6, 3, 7][c] of word j.
  auto ckpt = Checkpoint::Open(testing::ModelDir("llama-w4-awq"));
  ASSERT_TRUE(ckpt.ok());
  const TensorRecord* qzeros = *(*ckpt)->Find("model.layers.1.self_attn.o_proj.qzeros");  // [4, 16]
  constexpr int kNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  int differ = 0;  // rows whose zero is not the one an in-order nibble would give
  for (int row = 0; row < 128; ++row) {
    for (int g = 0; g < 4; ++g) {
      int32_t word;
      std::memcpy(&word, static_cast<const char*>(qzeros->data) + (g * 16 + row / 8) * 4, 4);
      const int zero = (word >> (4 * kNibble[row % 8])) & 0xF;
      ASSERT_EQ(l.o_proj.zero.data_as<uint8_t>()[row * 4 + g], zero) << row << " " << g;
      differ += zero != ((word >> (4 * (row % 8))) & 0xF);
    }
  }
  EXPECT_GT(differ, 0);
}

TEST(Int4LoadingTest, SymmetricGptqDropsItsStoredEights) {
  CpuBackend cpu(2);
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-w4-gptq-sym"), cpu);
  ASSERT_TRUE(w.ok()) << w.status();
  const LinearWeight& qkv = (*w)->layers[0].qkv;
  EXPECT_EQ(qkv.format, StorageFormat::Int4(/*zero_points=*/false, DType::kF32));
  EXPECT_TRUE(qkv.zero.empty());
  EXPECT_EQ(Ints(qkv.chunk_group), std::vector<int32_t>({0, 0, 1, 1}));  // groups of 64: two chunks each
}

// GPTQ desc_act: the storage columns are the input columns sorted by group, so that each chunk is
// in one group; the permutation tells the kernels which input column each reads.
TEST(Int4LoadingTest, ActOrderSortsColumnsByGroup) {
  CpuBackend cpu(2);
  const std::string dir = testing::ModelDir("qwen2-w4-gptq-actorder");
  auto w = LoadCheckpointWeights(dir, cpu);
  ASSERT_TRUE(w.ok()) << w.status();
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok());
  const TensorRecord* g_idx = *(*ckpt)->Find("model.layers.2.mlp.down_proj.g_idx");
  const LinearWeight& down = (*w)->layers[2].down;
  ASSERT_FALSE(down.input_perm.empty());
  EXPECT_EQ(down.int4_storage_columns(), 384);  // whole groups of 32: no padding
  const std::vector<int32_t> perm = Ints(down.input_perm), chunks = Ints(down.chunk_group);
  std::vector<int32_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int32_t> all(384);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(sorted, all);
  for (int j = 0; j < 384; ++j)
    ASSERT_EQ(static_cast<const int32_t*>(g_idx->data)[perm[j]], chunks[j / 32]) << j;
  EXPECT_FALSE(std::is_sorted(perm.begin(), perm.end()));  // really act-order
  EXPECT_TRUE(down.format.zero_points);
  EXPECT_FALSE((*w)->layers[0].qkv.bias.empty());  // Qwen2's q/k/v biases ride along
}

// A backend without int4 formats gets the dequantized values; one that takes float16 scales only
// (as the CUDA backend) gets them in float16: both the references' model.
TEST(Int4LoadingTest, DequantizedAndFloat16ScaleBackendsComputeTheSameModel) {
  for (const char* name : testing::kInt4FixtureModels) {
    SCOPED_TRACE(name);
    auto config = LoadModelConfig(testing::ModelDir(name));
    ASSERT_TRUE(config.ok());
    auto ckpt = Checkpoint::Open(testing::ModelDir(name));
    ASSERT_TRUE(ckpt.ok());
    auto runner = ModelRunner::Create(*config, **ckpt,
                                      std::make_unique<testing::RoundingBackend>(DType::kBF16, 0, config->vocab_size),
                                      nullptr, testing::ParityRunnerOptions());
    ASSERT_TRUE(runner.ok()) << runner.status();
    testing::RoundingBackend rounding(DType::kBF16, 0, config->vocab_size);
    auto dequantized = LoadCheckpointWeights(testing::ModelDir(name), rounding);
    ASSERT_TRUE(dequantized.ok()) << dequantized.status();
    EXPECT_EQ((*dequantized)->layers[0].qkv.format, StorageFormat::Float(DType::kF32));
    auto parity = testing::TeacherForcedParity(**runner, name);
    ASSERT_TRUE(parity.ok()) << parity.status();
    EXPECT_LE(parity->max_err, 1e-4);
    EXPECT_EQ(parity->agreement(), 1.0);

    CpuBackendOptions fp16;
    fp16.num_threads = 2;
    fp16.int4_fp16_scales = true;
    CpuBackend cpu(fp16);
    auto w = LoadCheckpointWeights(testing::ModelDir(name), cpu);
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_EQ((*w)->layers[0].down.scale.dtype(), DType::kF16);
    // fp16 holds the fixtures' fp16 and bf16 scales exactly.
    parity = Parity(testing::ModelDir(name), name, fp16);
    ASSERT_TRUE(parity.ok()) << parity.status();
    EXPECT_LE(parity->max_err, 1e-4);
    EXPECT_EQ(parity->agreement(), 1.0);
  }
}

// --- sharded files, GPTQ v2, tensor-parallel slices, pipeline stages ---

TEST(Int4LoadingTest, ShardedCopiesGiveTheSameLogits) {
  for (const char* name : testing::kInt4FixtureModels) {
    SCOPED_TRACE(name);
    test_util::TempDir dir;
    CheckpointCopy::Read(testing::ModelDir(name)).Write(dir.path(), /*shards=*/5);
    ASSERT_TRUE(std::filesystem::exists(dir / "model.safetensors.index.json"));
    auto parity = Parity(dir.path(), name);
    ASSERT_TRUE(parity.ok()) << parity.status();
    EXPECT_LE(parity->max_err, 1e-4);
    EXPECT_EQ(parity->agreement(), 1.0);
  }
}

// GPTQModel's v2 format stores the zeros themselves; v1 (the fixture) stores zero - 1. The same
// model either way.
TEST(Int4LoadingTest, GptqV2ZerosLoadTheSameModel) {
  const char* name = "qwen2-w4-gptq-actorder";
  CheckpointCopy copy = CheckpointCopy::Read(testing::ModelDir(name));
  copy.config["quantization_config"]["checkpoint_format"] = "gptq_v2";
  copy.config["quantization_config"]["format"] = "gptq_v2";
  int converted = 0;
  for (auto& [tensor_name, t] : copy.tensors) {
    if (!tensor_name.ends_with(".qzeros")) continue;
    for (size_t i = 0; i + 4 <= t.data.size(); i += 4) {
      uint32_t word, v2 = 0;
      std::memcpy(&word, t.data.data() + i, 4);
      for (int c = 0; c < 8; ++c) {
        const uint32_t zero = ((word >> (4 * c)) & 0xF) + 1;
        ASSERT_LE(zero, 15u) << "a v1 zero of 16 has no v2 nibble";
        v2 |= zero << (4 * c);
      }
      std::memcpy(t.data.data() + i, &v2, 4);
    }
    ++converted;
  }
  EXPECT_EQ(converted, 3 * 7);
  test_util::TempDir dir;
  copy.Write(dir.path());
  auto parity = Parity(dir.path(), name);
  ASSERT_TRUE(parity.ok()) << parity.status();
  EXPECT_LE(parity->max_err, 1e-4);
  EXPECT_EQ(parity->agreement(), 1.0);
}

// Each TP rank's slice holds exactly its rows (column-parallel) or columns (row-parallel) of the
// whole weight's values.
TEST(Int4LoadingTest, TensorParallelSlicesHoldTheirRowsAndColumns) {
  for (const char* name : {"llama-w4-ct", "llama-w4-awq", "qwen2-w4-gptq-actorder", "llama-w4-ct-asym-actorder"}) {
    SCOPED_TRACE(name);
    CpuBackend cpu(2);
    auto whole = LoadCheckpointWeights(testing::ModelDir(name), cpu);
    ASSERT_TRUE(whole.ok()) << whole.status();
    const std::vector<float> gate_up = Values((*whole)->layers[1].gate_up);  // [768, 128]: gate, then up
    const std::vector<float> down = Values((*whole)->layers[1].down);        // [128, 384]
    for (int tp : {2, 4}) {
      for (int rank = 0; rank < tp; ++rank) {
        auto part = LoadCheckpointWeights(testing::ModelDir(name), cpu, ShardSpec{rank, tp});
        ASSERT_TRUE(part.ok()) << part.status();
        const int64_t f = 384 / tp;
        const std::vector<float> gu = Values((*part)->layers[1].gate_up);  // [2f, 128]
        for (int64_t r = 0; r < 2 * f; ++r) {
          const int64_t src = r < f ? rank * f + r : 384 + rank * f + r - f;
          ASSERT_EQ(std::memcmp(&gu[r * 128], &gate_up[src * 128], 128 * 4), 0) << tp << " " << rank << " " << r;
        }
        const LinearWeight& d = (*part)->layers[1].down;
        ASSERT_EQ(d.in_features(), f);
        const std::vector<float> dv = Values(d);
        for (int64_t r = 0; r < 128; ++r)
          ASSERT_EQ(std::memcmp(&dv[r * f], &down[r * 384 + rank * f], f * 4), 0) << tp << " " << rank << " " << r;
      }
    }
  }
}

// An act-order slice of K takes a subset of each group's columns: sorted by group, each group is
// padded to whole chunks with columns that read no input.
TEST(Int4LoadingTest, ActOrderSlicesPadTheirGroupsToWholeChunks) {
  CpuBackend cpu(2);
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-w4-ct-asym-actorder"), cpu, ShardSpec{1, 4});
  ASSERT_TRUE(w.ok()) << w.status();
  const LinearWeight& down = (*w)->layers[0].down;  // 96 of 384 input columns, scattered over 12 groups
  EXPECT_EQ(down.in_features(), 96);
  const std::vector<int32_t> perm = Ints(down.input_perm), chunks = Ints(down.chunk_group);
  EXPECT_GT(down.int4_storage_columns(), 96);
  EXPECT_EQ(down.int4_storage_columns() % 32, 0);
  EXPECT_EQ(down.int4_groups(), static_cast<int64_t>(std::set<int32_t>(chunks.begin(), chunks.end()).size()));
  EXPECT_TRUE(std::is_sorted(chunks.begin(), chunks.end()));
  int real = 0;
  for (int32_t p : perm) real += p >= 0;
  EXPECT_EQ(real, 96);
}

TEST(Int4LoadingTest, SplitsThatCutGroupsAreRefused) {
  CpuBackend cpu(2);
  // Groups of 64: TP 4 gives o_proj input columns [32, 64) of 128, half a group.
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-w4-gptq-sym"), cpu, ShardSpec{1, 4});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(w.status().message(),
              AllOf(HasSubstr("layer 0 o_proj"), HasSubstr("model.layers.0.self_attn.o_proj"), HasSubstr("[32, 64)"),
                    HasSubstr("groups of 64"), HasSubstr("tensor-parallel size")));
  EXPECT_TRUE(LoadCheckpointWeights(testing::ModelDir("llama-w4-gptq-sym"), cpu, ShardSpec{1, 2}).ok());
}

TEST(Int4LoadingTest, PipelineStagesLoadOnlyTheirLayers) {
  CpuBackend cpu(2);
  ShardSpec last;
  last.first_layer = 2;
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-w4-awq"), cpu, last);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->layers.size(), 1u);
  EXPECT_TRUE((*w)->embedding.empty());
  EXPECT_TRUE((*w)->layers[0].down.format.int4());
}

// --- malformed checkpoints and unsupported variants ---

using Int4MalformedTest = testing::EditedCheckpointTest;

TEST_F(Int4MalformedTest, WrongQweightShape) {
  const absl::Status s = LoadEdited("llama-w4-awq", [](CheckpointCopy& c) {
    c.tensors["model.layers.1.mlp.down_proj.qweight"].shape = {192, 32};  // [384, 16] in the fixture
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.layers.1.mlp.down_proj.qweight'"), HasSubstr("[192, 32]"),
                                 HasSubstr("expected [384, 16]"), HasSubstr("AutoAWQ GEMM")));
}

TEST_F(Int4MalformedTest, WrongScaleShape) {
  const absl::Status s = LoadEdited("llama-w4-ct", [](CheckpointCopy& c) {
    auto& t = c.tensors["model.layers.0.self_attn.q_proj.weight_scale"];  // [128, 4]
    t.shape = {128, 2};
    t.data.resize(t.data.size() / 2);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.layers.0.self_attn.q_proj.weight_scale'"),
                                 HasSubstr("expected [128, 4]"), HasSubstr("pack-quantized")));
}

TEST_F(Int4MalformedTest, MissingGIdxWithDescAct) {
  const absl::Status s = LoadEdited("qwen2-w4-gptq-actorder", [](CheckpointCopy& c) {
    c.tensors.erase("model.layers.2.self_attn.v_proj.g_idx");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.layers.2.self_attn.v_proj.g_idx'"), HasSubstr("desc_act"),
                                 HasSubstr("GPTQ")));
}

TEST_F(Int4MalformedTest, MissingGIdxWithActorderGroup) {
  const absl::Status s = LoadEdited("llama-w4-ct-asym-actorder", [](CheckpointCopy& c) {
    c.tensors.erase("model.layers.0.mlp.up_proj.weight_g_idx");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.layers.0.mlp.up_proj.weight_g_idx'"), HasSubstr("actorder")));
}

TEST_F(Int4MalformedTest, GIdxOutOfRange) {
  const absl::Status s = LoadEdited("qwen2-w4-gptq-actorder", [](CheckpointCopy& c) {
    auto& t = c.tensors["model.layers.1.mlp.down_proj.g_idx"];
    const int32_t bad = 12;  // 12 groups of 32 in 384 columns: 0..11
    std::memcpy(t.data.data() + 5 * 4, &bad, 4);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'model.layers.1.mlp.down_proj.g_idx'"), HasSubstr("input column 5"),
                                 HasSubstr("group 12 of 12")));
}

TEST_F(Int4MalformedTest, FusedPartsWithDifferentGIdx) {
  const absl::Status s = LoadEdited("qwen2-w4-gptq-actorder", [](CheckpointCopy& c) {
    auto& t = c.tensors["model.layers.0.self_attn.k_proj.g_idx"];
    int32_t* g = reinterpret_cast<int32_t*>(t.data.data());
    const int other = static_cast<int>(std::find_if(g, g + 128, [&](int32_t v) { return v != g[0]; }) - g);
    std::swap(g[0], g[other]);
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("layer 0 q/k/v projection"), HasSubstr("k_proj"), HasSubstr("one g_idx")));
}

TEST_F(Int4MalformedTest, WeightShapeDisagrees) {
  const absl::Status s = LoadEdited("llama-w4-ct", [](CheckpointCopy& c) {
    auto& t = c.tensors["model.layers.2.mlp.gate_proj.weight_shape"];
    const int64_t dims[2] = {384, 120};
    std::memcpy(t.data.data(), dims, sizeof(dims));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("weight_shape"), HasSubstr("[384, 120]"), HasSubstr("[384, 128]")));
}

TEST_F(Int4MalformedTest, ThreeBitGptq) {
  const absl::Status s = LoadEdited("llama-w4-gptq-sym", [](CheckpointCopy& c) {
    c.config["quantization_config"]["bits"] = 3;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("quantization_config.bits"), HasSubstr("is 3"), HasSubstr("4-bit")));
}

TEST_F(Int4MalformedTest, EightBitPackQuantized) {
  const absl::Status s = LoadEdited("llama-w4-ct", [](CheckpointCopy& c) {
    c.config["quantization_config"]["config_groups"]["group_0"]["weights"]["num_bits"] = 8;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("group_0.weights.num_bits"), HasSubstr("is 8")));
}

TEST_F(Int4MalformedTest, OtherAwqVersion) {
  const absl::Status s = LoadEdited("llama-w4-awq", [](CheckpointCopy& c) {
    c.config["quantization_config"]["version"] = "gemv_fast";
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("quantization_config.version"), HasSubstr("'gemv_fast'"),
                                 HasSubstr("'gemm'")));
}

TEST_F(Int4MalformedTest, AwqWithoutZeroPoints) {
  const absl::Status s = LoadEdited("llama-w4-awq", [](CheckpointCopy& c) {
    c.config["quantization_config"]["zero_point"] = false;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("zero_point"));
}

TEST_F(Int4MalformedTest, MarlinPackedGptq) {
  const absl::Status s = LoadEdited("llama-w4-gptq-sym", [](CheckpointCopy& c) {
    c.config["quantization_config"]["checkpoint_format"] = "marlin";
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("checkpoint_format"), HasSubstr("'marlin'")));
}

TEST_F(Int4MalformedTest, QuantizedLmHead) {
  const absl::Status s = LoadEdited("llama-w4-gptq-sym", [](CheckpointCopy& c) {
    c.config["quantization_config"]["lm_head"] = true;
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("lm_head"), HasSubstr("LM head")));
}

TEST_F(Int4MalformedTest, PackedLmHeadTensor) {
  const absl::Status s = LoadEdited("llama-w4-ct", [](CheckpointCopy& c) {
    auto head = c.tensors.extract("lm_head.weight");
    head.key() = "lm_head.weight_packed";
    head.mapped().name = "lm_head.weight_packed";
    c.tensors.insert(std::move(head));
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("'lm_head.weight_packed'"), HasSubstr("4-bit LM head")));
}

TEST_F(Int4MalformedTest, ActivationQuantizationWithFourBitWeights) {
  const absl::Status s = LoadEdited("llama-w4-ct", [](CheckpointCopy& c) {
    c.config["quantization_config"]["config_groups"]["group_0"]["input_activations"] = {
        {"num_bits", 8}, {"type", "int"}, {"strategy", "token"}, {"dynamic", true}};
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(s.message(), AllOf(HasSubstr("input_activations"), HasSubstr("W4A16")));
}

// --- dummy weights ---

TEST(Int4DummyWeightsTest, ComeInTheRepackedLayout) {
  auto config = LoadModelConfig(testing::ModelDir("llama-tiny"));  // hidden 128, FFN 352 = 11 x 32
  ASSERT_TRUE(config.ok());
  CpuBackend cpu(2);
  LoadOptions int4;
  int4.quantization = OnlineQuantization::kInt4;
  auto w = CreateDummyWeights(*config, ShardSpec{}, cpu, 7, int4);
  ASSERT_TRUE(w.ok()) << w.status();
  const LinearWeight& gate_up = (*w)->layers[0].gate_up;
  EXPECT_EQ(gate_up.format, StorageFormat::Int4(/*zero_points=*/false, DType::kF32));
  EXPECT_EQ(gate_up.scale.shape(), Shape({704, 1}));  // K 128: one group of 128
  EXPECT_FLOAT_EQ(gate_up.scale.data_as<float>()[3], 1.0f / std::sqrt(21.25f * 128));
  const LinearWeight& down = (*w)->layers[0].down;
  EXPECT_EQ(down.scale.shape(), Shape({128, 11}));  // K 352: groups of 32
  EXPECT_EQ(Ints(down.chunk_group).back(), 10);
  EXPECT_EQ(gate_up.int4_group_chunks, 4);  // one group of 128 columns: 4 chunks
  EXPECT_EQ(down.int4_group_chunks, 1);     // groups of 32 columns
  // Codes spread over their range; the LM head stays float.
  std::set<int> codes;
  const Int4Layout down_layout{128, 352};
  for (int64_t c = 0; c < 352; ++c) codes.insert(down_layout.Get(down.weight.data_as<uint8_t>(), 0, c));
  EXPECT_EQ(codes.size(), 16u);
  EXPECT_EQ((*w)->lm_head.format, StorageFormat::Float(DType::kF32));
  // A 4-bit config's dummy weights take its group size.
  auto awq = LoadModelConfig(testing::ModelDir("llama-w4-awq"));
  ASSERT_TRUE(awq.ok());
  w = CreateDummyWeights(*awq, ShardSpec{}, cpu, 7);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ((*w)->layers[0].qkv.scale.shape(), Shape({256, 4}));
}

TEST(Int4DummyWeightsTest, FloatCheckpointsAreNotQuantizedAtLoad) {
  CpuBackend cpu(2);
  LoadOptions int4;
  int4.quantization = OnlineQuantization::kInt4;
  auto w = LoadCheckpointWeights(testing::ModelDir("llama-tiny"), cpu, {}, int4);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(w.status().message(), AllOf(HasSubstr("dummy weights only"), HasSubstr("tools/w4a16/quantize.py")));
}

}  // namespace
}  // namespace llm
