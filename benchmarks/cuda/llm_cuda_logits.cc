// llm_cuda_logits: teacher-forced logits of a checkpoint over a token sequence, for parity checks
// against other implementations (hf_parity.py). The first T - N tokens are prefilled in chunks
// (every position's logits kept); the last N are fed one token per step through the decode path
// (CUDA graphs), so both paths are checked.
// Usage: [mpirun -np TP*PP] llm_cuda_logits --model DIR --tokens IDS.i32 --out LOGITS.f32
//            [--dtype bf16|fp16|fp32] [--device cuda|cpu] [--decode N] [--chunk C] [--tp T --pp P]
//            [--gpu-memory-fraction F] [--quantization fp8|int4] [--kv-cache-dtype auto|bf16|fp8]
// Under mpirun each rank loads its TP x PP shard (device = local rank, NCCL on the GPU, MPI on the
// CPU) and the steps pass through the stages; the last stage's first TP rank writes the file, so
// tensor/pipeline-parallel runs can be compared with a single-GPU one.
// Output: float32 [T, vocab], row-major.
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "engine/backend/backend_factory.h"
#include "engine/distributed/engine_group.h"
#include "engine/distributed/pipeline_executor.h"
#include "engine/model/checkpoint.h"
#include "engine/kv_cache/kv_cache.h"
#include "engine/model/config.h"
#include "engine/model/weights.h"
#include "engine/runtime/model_runner.h"
#include "parallel/mpi_communicator.h"
#include "parallel/mpi_runtime.h"

namespace {

[[noreturn]] void Die(const std::string& msg) {
  std::fprintf(stderr, "llm_cuda_logits: %s\n", msg.c_str());
  std::exit(1);
}
void Check(const absl::Status& s) {
  if (!s.ok()) Die(std::string(s.message()));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace llm;
  std::string model, tokens_path, out_path, dtype_name = "bf16", device_name = "cuda";
  std::string quantization, kv_cache_dtype = "auto";  // online quantization of a bf16 checkpoint
  int decode = 0, chunk = 512, tp = 1, pp = 1;
  double gpu_memory_fraction = 0.9;  // of the device for the arena (the caller may hold some of it)
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) Die("missing value for " + k);
    const std::string v = argv[++i];
    if (k == "--model") model = v;
    else if (k == "--tokens") tokens_path = v;
    else if (k == "--out") out_path = v;
    else if (k == "--dtype") dtype_name = v;
    else if (k == "--device") device_name = v;
    else if (k == "--decode") decode = std::stoi(v);
    else if (k == "--chunk") chunk = std::stoi(v);
    else if (k == "--tp") tp = std::stoi(v);
    else if (k == "--pp") pp = std::stoi(v);
    else if (k == "--gpu-memory-fraction") gpu_memory_fraction = std::stod(v);
    else if (k == "--quantization") quantization = v;
    else if (k == "--kv-cache-dtype") kv_cache_dtype = v;
    else Die("unknown flag " + k);
  }
  if (model.empty() || tokens_path.empty() || out_path.empty()) Die("need --model, --tokens and --out");
  std::vector<int32_t> tokens;
  {
    std::ifstream f(tokens_path, std::ios::binary | std::ios::ate);
    const size_t bytes = f.tellg();
    f.seekg(0);
    tokens.assign(bytes / 4, 0);
    f.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 4));
  }
  const int64_t t_total = static_cast<int64_t>(tokens.size());
  if (t_total == 0 || decode >= t_total) Die("need more tokens than --decode steps");

  auto mpi = MpiRuntime::Create(MpiRuntime::LaunchedByMpiLauncher() ? MpiMode::kInit : MpiMode::kSingleProcess);
  Check(mpi.status());
  auto topology = (*mpi)->MakeTopology(tp, pp);
  Check(topology.status());
  const Topology& t = *topology;
  auto groups = MakeParallelGroups(**mpi, t);
  Check(groups.status());

  auto config = LoadModelConfig(model);
  Check(config.status());
  auto ckpt = Checkpoint::Open(model);
  Check(ckpt.status());
  auto dtype = ParseDType(dtype_name);
  Check(dtype.status());
  auto device = ParseDeviceKind(device_name);
  Check(device.status());
  auto online_quantization = ParseOnlineQuantization(quantization);
  Check(online_quantization.status());
  auto kv_dtype = ParseKvCacheDType(kv_cache_dtype);
  Check(kv_dtype.status());
  auto layers = StageLayers(static_cast<int>(config->num_layers), pp, t.pp_stage(), {});
  Check(layers.status());
  BackendOptions bo;
  bo.device = *device;
  bo.dtype = *dtype;
  bo.device_index = t.device();
  bo.gpu_memory_fraction = gpu_memory_fraction;
  auto backend = CreateBackend(bo);
  Check(backend.status());
  auto data = DataPlane::Create(*groups, **backend, t.device(), absl::Seconds(300));
  Check(data.status());
  Communicator* pp_comm = data->pp();
  ModelRunnerOptions ro;
  ro.limits.max_tokens = chunk;
  ro.limits.max_seqs = 1;
  ro.limits.max_logit_rows = chunk;  // teacher-forced: logits at every position
  ro.block_size = 16;
  ro.max_context = (t_total + 15) / 16 * 16;
  ro.num_kv_blocks = ro.max_context / 16 + 1;
  ro.load.quantization = *online_quantization;
  ro.kv_cache_dtype = *kv_dtype;
  ro.shard.tp_rank = t.tp_rank();
  ro.shard.tp_size = t.tp_size();
  ro.shard.first_layer = layers->begin;
  ro.shard.end_layer = layers->end;
  auto runner = ModelRunner::Create(*config, **ckpt, std::move(*backend), data->tp(), ro);
  Check(runner.status());
  ModelRunner& r = **runner;
  const int64_t vocab = config->vocab_size;
  const bool writer = t.is_last_stage() && t.tp_rank() == 0;
  std::vector<int32_t> blocks(ro.max_context / 16);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::vector<float> logits(writer ? static_cast<size_t>(t_total) * vocab : 0), padded;
  const int64_t prefill = t_total - decode;
  for (int64_t start = 0; start < t_total;) {
    const int64_t n = start < prefill ? std::min<int64_t>(chunk, prefill - start) : 1;
    StepPlan plan;
    plan.block_table_width = r.block_table_width();
    plan.Clear();
    plan.AddSequence(absl::MakeSpan(tokens).subspan(start, n), static_cast<int32_t>(start), blocks, 16, true);
    plan.logit_rows.resize(n);
    std::iota(plan.logit_rows.begin(), plan.logit_rows.end(), 0);
    auto out = ForwardThroughStage(r, *pp_comm, t, plan);
    Check(out.status());
    if (writer) {
      // With TP the gathered vocabulary is padded to tp * vocab_local columns: keep the first vocab.
      const int64_t width = out->dim(1);
      padded.resize(static_cast<size_t>(n) * width);
      Check(r.backend().CopyToHost(padded.data(), *out));
      Check(r.backend().Synchronize());
      for (int64_t i = 0; i < n; ++i)
        std::copy_n(&padded[i * width], vocab, &logits[(start + i) * vocab]);
    } else {
      Check(r.backend().Synchronize());
    }
    start += n;
  }
  if (writer) {
    std::ofstream out(out_path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
    std::printf("llm_cuda_logits: %ld tokens (%ld prefilled, %d decoded, %d graphs), vocab %ld, TP%d x PP%d -> %s\n",
                long(t_total), long(prefill), decode, r.graphs_captured(), long(vocab), tp, pp, out_path.c_str());
  }
  return 0;
}
