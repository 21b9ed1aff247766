// The `llm` binary as users and other checks call it: exit codes, --json contract, error messages.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/runtime/fixture_reference.h"

namespace llm {
namespace {

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// This process's own folder under the test temp dir, removed at exit: two runs of the suite on
// one machine (two CI jobs, or a developer's run beside one) must not share files.
const std::string& ScratchDir();
void RemoveScratchDir() {
  std::error_code ignored;
  std::filesystem::remove_all(ScratchDir(), ignored);
}
const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string d = absl::StrCat(::testing::TempDir(), "/cli_test_", getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  // Registered once `dir` is constructed, so the handler runs before `dir` is destroyed.
  static const bool cleanup_registered = std::atexit(RemoveScratchDir) == 0;
  (void)cleanup_registered;
  return dir;
}

RunResult RunLlm(const std::string& args) {
  const std::string err_file = ScratchDir() + "/cli_stderr.txt";
  const std::string cmd = absl::StrCat(LLM_BINARY_DIR, "/bin/llm ", args, " 2>", err_file);
  RunResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

nlohmann::json LastJsonLine(const std::string& out) {
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  if (lines.empty()) return nullptr;
  return nlohmann::json::parse(lines.back(), nullptr, false);
}

std::string Model(const std::string& name) { return testing::ModelDir(name); }

// Greedy tokens through the whole stack (CLI -> engine -> scheduler -> CPU backend) equal the
// reference's 24 greedy tokens, for every fixture's first three prompts.
TEST(CliGenerateTest, GreedyTokensMatchReference) {
  for (const char* model : testing::kFixtureModels) {
    auto prompts = testing::LoadFixturePrompts(model);
    for (int i = 0; i < 3; ++i) {
      SCOPED_TRACE(absl::StrCat(model, " prompt ", i));
      RunResult r = RunLlm(absl::StrCat("generate --model ", Model(model), " --prompt-ids ",
                                     absl::StrJoin(prompts[i].prompt, ","),
                                     " --max-tokens 24 --temperature 0 --ignore-eos --json --threads 2"));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      nlohmann::json j = LastJsonLine(r.out);
      ASSERT_TRUE(j.is_object()) << r.out;
      EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), prompts[i].greedy);
      EXPECT_EQ(j["finish_reason"], "length");
      EXPECT_EQ(j["prompt_tokens"], prompts[i].prompt.size());
      EXPECT_EQ(j["completion_tokens"], 24);
      EXPECT_TRUE(j.contains("text"));
    }
  }
}

TEST(CliGenerateTest, SameSeedSameOutputAndSeedsDiffer) {
  const std::string base = absl::StrCat("generate --model ", Model("qwen2-tiny"),
                                        " --prompt-ids 3,14,15,92 --max-tokens 20 --temperature 1.0 --top-k 50 "
                                        "--top-p 0.9 --min-p 0.01 --json --seed ");
  RunResult a = RunLlm(base + "7"), b = RunLlm(base + "7"), c = RunLlm(base + "8");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(LastJsonLine(a.out)["token_ids"], LastJsonLine(b.out)["token_ids"]);
  EXPECT_NE(LastJsonLine(a.out)["token_ids"], LastJsonLine(c.out)["token_ids"]);
}

// --top-k -1 is vLLM's spelling of "off": the same tokens as 0. A model without a tokenizer prints
// its token ids without --json, and --logprobs is printed, not dropped.
TEST(CliGenerateTest, TopKMinusOneIsOffAndPlainOutputKeepsIdsAndLogprobs) {
  const std::string base = absl::StrCat("generate --model ", Model("qwen2-tiny"),
                                        " --prompt-ids 3,14,15,92 --max-tokens 6 --temperature 1.0 --seed 3 ");
  RunResult off = RunLlm(base + "--top-k -1 --json"), zero = RunLlm(base + "--top-k 0 --json");
  ASSERT_EQ(off.exit_code, 0) << off.err;
  EXPECT_EQ(LastJsonLine(off.out)["token_ids"], LastJsonLine(zero.out)["token_ids"]);
  RunResult plain = RunLlm(base + "--logprobs 2");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  std::string ids;
  for (int id : LastJsonLine(zero.out)["token_ids"]) absl::StrAppend(&ids, "[", id, "]");
  EXPECT_EQ(plain.out.substr(0, ids.size()), ids) << plain.out;
  EXPECT_EQ(LastJsonLine(plain.out)["logprobs"].size(), 6u) << plain.out;
}

// --logit-bias: +100 on a token makes greedy decoding emit it at every step.
TEST(CliGenerateTest, LogitBiasForcesAToken) {
  RunResult r = RunLlm(absl::StrCat("generate --model ", Model("llama-tiny"),
                                    " --prompt-ids 1,5,9 --max-tokens 5 --temperature 0 --ignore-eos --json "
                                    "--logit-bias 7:100,3:-2.5"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = LastJsonLine(r.out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), std::vector<int32_t>(5, 7));
}

TEST(CliTest, VersionEverywhere) {
  for (const char* args : {"--version", "serve --version", "generate --version", "loadtest --version"}) {
    RunResult r = RunLlm(args);
    EXPECT_EQ(r.exit_code, 0) << args;
    EXPECT_EQ(r.out.rfind("llm 0.", 0), 0u) << args << ": " << r.out;
  }
}

// --fixed-kernels only changes how the CUDA backend picks its decode linears: accepted everywhere,
// and on the CPU the output is unchanged.
TEST(CliGenerateTest, FixedKernelsFlagIsAcceptedAndKeepsTheOutput) {
  const std::string base =
      absl::StrCat("generate --model ", Model("llama-tiny"), " --prompt-ids 1,5,9 --max-tokens 8 --temperature 0 --json");
  RunResult plain = RunLlm(base), fixed = RunLlm(base + " --fixed-kernels");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(fixed.exit_code, 0) << fixed.err;
  EXPECT_EQ(LastJsonLine(plain.out)["token_ids"], LastJsonLine(fixed.out)["token_ids"]);
}

// The FP8 layouts through the whole stack (config.json / hf_quant_config.json, E4M3 weights and
// their scales) give the reference's greedy tokens.
TEST(CliGenerateTest, Fp8CheckpointsGiveReferenceTokens) {
  for (const char* model : testing::kFp8FixtureModels) {
    auto prompts = testing::LoadFixturePrompts(model);
    for (int i = 0; i < 2; ++i) {
      SCOPED_TRACE(absl::StrCat(model, " prompt ", i));
      RunResult r = RunLlm(absl::StrCat("generate --model ", Model(model), " --prompt-ids ",
                                        absl::StrJoin(prompts[i].prompt, ","),
                                        " --max-tokens 24 --temperature 0 --ignore-eos --json --threads 2"));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(LastJsonLine(r.out)["token_ids"].get<std::vector<int32_t>>(), prompts[i].greedy);
    }
  }
}

// Each 4-bit layout through `llm generate`: the reference's greedy tokens; and --quantization int4
// takes dummy weights only, refusing a float checkpoint with a runtime error naming the quantizer.
TEST(CliGenerateTest, Int4CheckpointsGiveReferenceTokens) {
  for (const char* model : testing::kInt4FixtureModels) {
    auto prompts = testing::LoadFixturePrompts(model);
    SCOPED_TRACE(model);
    RunResult r = RunLlm(absl::StrCat("generate --model ", Model(model), " --prompt-ids ",
                                      absl::StrJoin(prompts[2].prompt, ","),
                                      " --max-tokens 24 --temperature 0 --ignore-eos --json --threads 2"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(LastJsonLine(r.out)["token_ids"].get<std::vector<int32_t>>(), prompts[2].greedy);
  }
  RunResult r = RunLlm(absl::StrCat("generate --model ", Model("llama-tiny"), " --prompt-ids 1,2 --quantization int4"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("tools/w4a16/quantize.py"), std::string::npos) << r.err;
  r = RunLlm(absl::StrCat("generate --model ", Model("llama-tiny"),
                          " --prompt-ids 1,2 --max-tokens 3 --quantization int4 --dummy-weights --json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// --quantization fp8, --kv-cache-dtype fp8 and --emulate-fp8 on the CPU: accepted, and they do
// change the arithmetic (the logprob of the greedy token moves).
TEST(CliGenerateTest, Fp8FlagsRunOnTheCpu) {
  const std::string base = absl::StrCat("generate --model ", Model("llama-tiny"),
                                        " --prompt-ids 1,5,9,33,7 --max-tokens 6 --temperature 0 --logprobs 1 --json");
  RunResult plain = RunLlm(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (const char* flags : {" --quantization fp8", " --kv-cache-dtype fp8", " --quantization fp8 --emulate-fp8",
                            " --quantization fp8 --kv-cache-dtype fp8 --emulate-fp8"}) {
    SCOPED_TRACE(flags);
    RunResult r = RunLlm(base + flags);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json a = LastJsonLine(plain.out), b = LastJsonLine(r.out);
    ASSERT_TRUE(b.is_object()) << r.out;
    EXPECT_EQ(b["completion_tokens"], 6);
    EXPECT_NE(a["logprobs"][0]["logprob"].get<double>(), b["logprobs"][0]["logprob"].get<double>());
  }
}

TEST(CliErrorsTest, BadUsageExitsTwoWithMessage) {
  struct Case {
    std::string args;
    std::string message;
  } cases[] = {
      {"", "usage: llm"},
      {"frobnicate", "unknown command"},
      {"generate --model " + Model("llama-tiny"), "exactly one of --prompt and --prompt-ids"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --prompt hi", "exactly one of"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,x", "is not a token id"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --bogus", "unknown flag --bogus"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --max-tokens abc", "expects an integer"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,99999", "outside the vocabulary"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --temperature -1", "temperature"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --top-p 1.5", "top_p"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --max-tokens 100000", "exceeds the context"},
      {"generate --model " + Model("llama-tiny") + " --prompt hello", "no tokenizer"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --gpu-memory-fraction 0",
       "--gpu-memory-fraction must be in (0, 1]"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --gpu-memory-fraction 1.5",
       "--gpu-memory-fraction must be in (0, 1]"},
      {"serve --gpu-memory-fraction -0.1", "--gpu-memory-fraction must be in (0, 1]"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --quantization int3",
       "--quantization: unknown quantization 'int3'"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --kv-cache-dtype fp4",
       "--kv-cache-dtype: unknown KV cache dtype 'fp4'"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --logit-bias 5", "'5' is not ID:BIAS"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --logit-bias 5:200", "must be in [-100, 100]"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --block-size 0", "--block-size must be in [1, 4096]"},
      {"serve --block-size -4", "--block-size must be in [1, 4096]"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --kv-cache-fraction 2",
       "--kv-cache-fraction must be in (0, 1]"},
      {"serve --kv-cache-fraction 0", "--kv-cache-fraction must be in (0, 1]"},
      {"serve --max-seqs -1", "--max-seqs must be in [0, 65536]"},
      {"serve --max-tokens-per-step -1", "--max-tokens-per-step must be in"},
      {"serve --threads -2", "--threads must be in"},
      {"serve --kv-cache-blocks -3", "--kv-cache-blocks must be in"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --dtype int8", "--dtype must be auto, bf16"},
      {"generate --model " + Model("llama-tiny") + " --prompt-ids 1,2 --device cpu --dtype bf16",
       "--dtype bf16: the CPU backend computes in float32 only"},
      {"loadtest --target 127.0.0.1:1 --concurrency 1 --num-requests -5", "--num-requests must be >= 0"},
      {"loadtest --target 127.0.0.1:1 --concurrency 1 --num-requests 4 --connections 0",
       "--connections must be at least 1"},
      {"tokenize --text hi", "--tokenizer (or --model) is required"},
      {"tokenize --tokenizer x", "exactly one of --text"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.args);
    RunResult r = RunLlm(c.args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  }
}

TEST(CliErrorsTest, MissingModelOrFileAsModelExitsTwoNamingTheProblem) {
  RunResult r = RunLlm("generate --model /nonexistent/model --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("model folder '/nonexistent/model' does not exist"), std::string::npos) << r.err;
  for (const char* command : {"generate --prompt-ids 1", "serve --port 0 --http-port -1"}) {
    r = RunLlm(absl::StrCat(command, " --model ", Model("llama-tiny"), "/config.json"));
    EXPECT_EQ(r.exit_code, 2) << command;
    EXPECT_NE(r.err.find("config.json' is a file; --model takes the folder"), std::string::npos) << r.err;
  }
}

// Configs the engine cannot serve are refused before anything loads, naming the key (exit 2).
TEST(CliErrorsTest, MalformedConfigsExitTwoNamingTheKey) {
  struct Case {
    const char* name;
    std::function<void(nlohmann::json&, nlohmann::json&)> mutate;  // config.json, generation_config.json
    std::string message;
  } cases[] = {
      {"no model_type", [](nlohmann::json& c, nlohmann::json&) { c.erase("model_type"); },
       "key 'model_type' is missing (required; supported: llama, mistral, qwen2, qwen3)"},
      {"gpt2", [](nlohmann::json& c, nlohmann::json&) { c["model_type"] = "gpt2"; },
       "key 'model_type' is 'gpt2', which is not supported"},
      {"eos outside", [](nlohmann::json& c, nlohmann::json&) { c["eos_token_id"] = 384; },
       "key 'eos_token_id' holds token id 384, outside the vocabulary [0, 384)"},
      {"bos outside", [](nlohmann::json& c, nlohmann::json&) { c["bos_token_id"] = 1000; },
       "key 'bos_token_id' holds token id 1000"},
      {"generation eos outside", [](nlohmann::json&, nlohmann::json& g) { g["eos_token_id"] = {2, 999}; },
       "generation_config.json: key 'eos_token_id' holds token id 999"},
      {"huge context",
       [](nlohmann::json& c, nlohmann::json&) { c["max_position_embeddings"] = int64_t{1} << 62; },
       "key 'max_position_embeddings' is 4611686018427387904; at most 16777216"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::filesystem::path dir = std::filesystem::path(ScratchDir()) / "malformed-config";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    nlohmann::json config = nlohmann::json::parse(std::ifstream(Model("llama-tiny") + "/config.json"));
    nlohmann::json generation = nlohmann::json::parse(std::ifstream(Model("llama-tiny") + "/generation_config.json"));
    c.mutate(config, generation);
    std::ofstream(dir / "config.json") << config.dump();
    std::ofstream(dir / "generation_config.json") << generation.dump();
    std::filesystem::copy_file(Model("llama-tiny") + "/model.safetensors", dir / "model.safetensors");
    for (const char* command : {"generate --prompt-ids 1", "serve --port 0 --http-port -1"}) {
      RunResult r = RunLlm(absl::StrCat(command, " --model ", dir.string()));
      EXPECT_EQ(r.exit_code, 2) << command;
      EXPECT_NE(r.err.find(c.message), std::string::npos) << command << ": " << r.err;
    }
  }
}

TEST(CliErrorsTest, CorruptModelExitsOneNamingTheProblem) {
  RunResult r;

  // A copy of a fixture with a truncated weights file.
  const std::string dir = ScratchDir() + "/truncated-model";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(Model("llama-tiny") + "/config.json", dir + "/config.json");
  {
    std::ifstream in(Model("llama-tiny") + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(dir + "/model.safetensors", std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  r = RunLlm("generate --model " + dir + " --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model.safetensors"), std::string::npos) << r.err;
}

TEST(CliTest, HelpOnEverySubcommand) {
  for (const char* cmd : {"generate", "tokenize"}) {
    RunResult r = RunLlm(absl::StrCat(cmd, " --help"));
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_NE(r.out.find(absl::StrCat("usage: llm ", cmd)), std::string::npos);
  }
  for (const char* cmd : {"generate", "serve"}) {
    const std::string usage = RunLlm(absl::StrCat(cmd, " --help")).out;
    EXPECT_NE(usage.find("--gpu-memory-fraction"), std::string::npos) << cmd;
  }
  EXPECT_EQ(RunLlm("--help").exit_code, 0);
}

// tokenize --jsonl over every Llama-3 case: one {"token_ids": [...]} line per input line, in order.
TEST(CliTokenizeTest, JsonlMatchesReferenceCases) {
  std::ifstream in(std::string(LLM_TEST_DATA_DIR) + "/tokenizers/llama3-cases.json");
  nlohmann::json cases = nlohmann::json::parse(in)["cases"];
  const std::string input = ScratchDir() + "/cases.jsonl";
  {
    std::ofstream out(input);
    for (const auto& c : cases) out << nlohmann::json(c["text"].get<std::string>()).dump() << "\n";
  }
  RunResult r = RunLlm(absl::StrCat("tokenize --tokenizer ", LLM_TOKENIZER_DATA_DIR, "/llama3-tokenizer.json --jsonl ", input));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), cases.size());
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(nlohmann::json::parse(lines[i])["token_ids"], cases[i]["ids"]) << i;

  r = RunLlm(absl::StrCat("tokenize --tokenizer ", LLM_TOKENIZER_DATA_DIR,
                       "/llama2-tokenizer.json --text 'Hello world' --add-special-tokens"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["token_ids"][0], 1);  // <s>
}


// llm chat-template: the contract tests use. One JSON line with the text and ids (no BOS added
// twice); template errors and usage errors exit 2 with the message.
TEST(CliChatTemplateTest, RendersTextAndIdsAndReportsErrors) {
  const std::string dir = ScratchDir();
  const std::string tmpl = dir + "/cli_chat.jinja";
  std::ofstream(tmpl) << "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant:{% endif %}";
  const std::string request = dir + "/cli_chat_request.json";
  std::ofstream(request) << R"({"messages": [{"role": "user", "content": "Hello world"}], "add_generation_prompt": true})";
  const std::string tokenizer = std::string(LLM_TOKENIZER_DATA_DIR) + "/llama3-tokenizer.json";
  RunResult r = RunLlm(absl::StrCat("chat-template --template ", tmpl, " --tokenizer ", tokenizer,
                                    " --bos-token '<|begin_of_text|>' --request ", request));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = LastJsonLine(r.out);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["text"], "<|begin_of_text|>user: Hello world\nassistant:");
  const std::vector<int32_t> ids = j["ids"].get<std::vector<int32_t>>();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 128000);
  EXPECT_NE(ids[1], 128000);

  const std::string bad = dir + "/cli_chat_bad.jinja";
  std::ofstream(bad) << "line one\n{{ raise_exception('nope') }}";
  r = RunLlm(absl::StrCat("chat-template --template ", bad, " --tokenizer ", tokenizer, " --request ", request));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("template line 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  r = RunLlm(absl::StrCat("chat-template --template ", tmpl, " --tokenizer ", tokenizer));
  EXPECT_EQ(r.exit_code, 2);
  r = RunLlm(absl::StrCat("chat-template --template ", tmpl, " --tokenizer ", tokenizer, " --request '{\"x\": 1}'"));
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace llm
