// End to end against a real `llm serve` process: generation through gRPC. Concurrent streams
// must produce exactly what each request produces alone; streamed output must equal the unary
// output; cancellation and deadlines must end requests and free their KV cache blocks.
#include <sys/wait.h>

#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/reflection/v1/reflection.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/runtime/fixture_reference.h"
#include "tests/server/server_process.h"

namespace llm::testing {
namespace {

class GenerateTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = ServerProcess::Start({"--model", TokenizerModelDir()}).release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(server_, nullptr);
    stub_ = server_->NewStub();
  }

  static ServerProcess* server_;
  std::unique_ptr<v1::Llm::Stub> stub_;
};

ServerProcess* GenerateTest::server_ = nullptr;

// 64 requests of every kind: fixture prompts (whose greedy tokens the reference knows), random
// token-id prompts of 1..200 tokens, text prompts; greedy, seeded sampling with top-k/top-p/min-p,
// penalties, logprobs, EOS honoured or not, priorities.
std::vector<v1::GenerateRequest> MixedRequests() {
  const auto fixtures = LoadFixturePrompts("llama-tiny");
  const char* texts[] = {"the quick brown fox", "hello world", "once upon a time there was", "a",
                         "é ü 你好 🙂"};
  std::mt19937 rng(7);
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < 64; ++i) {
    v1::GenerateRequest r;
    if (i < 4) {
      r = GreedyIds(fixtures[i].prompt, 24);
    } else {
      std::vector<int32_t> prompt(1 + rng() % 200);
      for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 384);
      r = GreedyIds(prompt, 1 + static_cast<int>(rng() % 48));
      if (i % 8 == 5) r.set_text(texts[i % 5]);
    }
    r.set_request_id(absl::StrCat("mixed-", i));
    switch (i < 4 ? 0 : i % 6) {
      case 2:  // seeded sampling: reproducible whatever the batch
        r.mutable_sampling()->set_temperature(0.8f);
        r.mutable_sampling()->set_top_k(40);
        r.mutable_sampling()->set_top_p(0.95f);
        r.mutable_sampling()->set_seed(1000 + i);
        break;
      case 3:
        r.mutable_sampling()->set_temperature(1.2f);
        r.mutable_sampling()->set_min_p(0.05f);
        r.mutable_sampling()->set_repetition_penalty(1.2f);
        r.mutable_sampling()->set_presence_penalty(0.5f);
        r.mutable_sampling()->set_frequency_penalty(0.3f);
        r.mutable_sampling()->set_seed(7 * i);
        break;
      case 4:
        r.set_top_logprobs(3);
        r.mutable_stopping()->set_ignore_eos(false);
        break;
      case 5:
        r.set_priority(static_cast<int32_t>(rng() % 3) - 1);
        r.mutable_stopping()->add_stop_token_ids(static_cast<int32_t>(rng() % 384));
        break;
    }
    requests.push_back(r);
  }
  return requests;
}

void ExpectSameOutput(const v1::GenerateResponse& a, const v1::GenerateResponse& b) {
  EXPECT_EQ(Ids(a), Ids(b));
  EXPECT_EQ(a.text(), b.text());
  EXPECT_EQ(a.finish_reason(), b.finish_reason());
  EXPECT_EQ(a.usage().prompt_tokens(), b.usage().prompt_tokens());
  EXPECT_EQ(a.usage().completion_tokens(), b.usage().completion_tokens());
  ASSERT_EQ(a.logprobs_size(), b.logprobs_size());
  for (int i = 0; i < a.logprobs_size(); ++i) {
    EXPECT_EQ(a.logprobs(i).token_id(), b.logprobs(i).token_id());
    EXPECT_NEAR(a.logprobs(i).logprob(), b.logprobs(i).logprob(), 1e-4);
    ASSERT_EQ(a.logprobs(i).top_size(), b.logprobs(i).top_size());
  }
}

// Runs the 64 requests alone (streamed and unary must agree) and then all at once on `server`;
// returns the solo outputs after checking the concurrent ones equal them.
void CheckConcurrentEqualsSolo(ServerProcess& server, std::vector<v1::GenerateResponse>* solo_out) {
  auto stub_ = server.NewStub();
  auto* server_ = &server;
  const auto requests = MixedRequests();
  const auto fixtures = LoadFixturePrompts("llama-tiny");
  // Alone, one after the other: the streamed output equals the unary one.
  std::vector<v1::GenerateResponse> solo;
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].request_id());
    const CallResult streamed = Stream(*stub_, requests[i]);
    const CallResult unary = Complete(*stub_, requests[i]);
    ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
    ASSERT_TRUE(unary.status.ok()) << unary.status.error_message();
    ExpectSameOutput(streamed.merged, unary.merged);
    EXPECT_EQ(streamed.merged.request_id(), requests[i].request_id());
    for (size_t p = 0; p + 1 < streamed.parts.size(); ++p)
      EXPECT_EQ(streamed.parts[p].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
    if (i < 4) {
      EXPECT_EQ(Ids(streamed.merged), fixtures[i].greedy);  // the reference's own tokens
    }
    if (requests[i].stopping().ignore_eos() && requests[i].stopping().stop_token_ids().empty()) {
      EXPECT_EQ(streamed.merged.finish_reason(), v1::FINISH_REASON_LENGTH);
      EXPECT_EQ(streamed.merged.token_ids_size(), requests[i].stopping().max_tokens());
    }
    if (requests[i].top_logprobs() > 0) {
      ASSERT_EQ(streamed.merged.logprobs_size(), streamed.merged.token_ids_size());
      for (const auto& lp : streamed.merged.logprobs()) EXPECT_EQ(lp.top_size(), 3);
    }
    if (requests[i].prompt_case() == v1::GenerateRequest::kText) {
      EXPECT_FALSE(streamed.merged.text().empty());
    }
    solo.push_back(streamed.merged);
  }
  // All at once.
  std::vector<CallResult> concurrent(requests.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i)
    threads.emplace_back([&, i] {
      auto stub = server_->NewStub();
      concurrent[i] = Stream(*stub, requests[i]);
    });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < requests.size(); ++i) {
    SCOPED_TRACE(requests[i].request_id());
    ASSERT_TRUE(concurrent[i].status.ok()) << concurrent[i].status.error_message();
    ExpectSameOutput(concurrent[i].merged, solo[i]);
  }
  EXPECT_EQ(server_->Metric("llm_kv_cache_blocks_used"), 0);
  EXPECT_GE(server_->Metric("llm_requests_finished_total{finish_reason=\"length\"}"), 64);
  *solo_out = solo;
}

std::vector<v1::GenerateResponse>* g_single_rank_solo = nullptr;

TEST_F(GenerateTest, SixtyFourConcurrentStreamsEqualSoloRunsAndUnary) {
  static std::vector<v1::GenerateResponse> solo;
  CheckConcurrentEqualsSolo(*server_, &solo);
  g_single_rank_solo = &solo;
}

// The same under `mpirun -np 4 llm serve --tp 2 --pp 2`: concurrent equals solo there too, and
// both equal the single-rank server's outputs.
TEST_F(GenerateTest, TensorAndPipelineParallelServerGivesTheSameOutputs) {
  auto parallel = ServerProcess::StartMpi(4, {"--model", TokenizerModelDir(), "--tp", "2", "--pp", "2"});
  ASSERT_NE(parallel, nullptr);
  std::vector<v1::GenerateResponse> solo;
  CheckConcurrentEqualsSolo(*parallel, &solo);
  std::vector<v1::GenerateResponse> single;
  if (g_single_rank_solo == nullptr) {  // run alone: compute the single-rank outputs here
    CheckConcurrentEqualsSolo(*server_, &single);
    g_single_rank_solo = &single;
  }
  ASSERT_EQ(solo.size(), g_single_rank_solo->size());
  for (size_t i = 0; i < solo.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectSameOutput(solo[i], (*g_single_rank_solo)[i]);
  }
  if (g_single_rank_solo == &single) g_single_rank_solo = nullptr;
  // mpirun forwards SIGUSR1 to every rank; rank 0 drains and stops the workers; all exit 0.
  parallel->Signal(SIGUSR1);
  EXPECT_EQ(parallel->WaitForExit(absl::Seconds(60)), 0) << parallel->Log();
}

TEST_F(GenerateTest, StopStringsEndTextIdenticallyStreamedAndUnary) {
  v1::GenerateRequest request;
  request.set_text("once upon a time");
  request.mutable_sampling()->set_temperature(0);
  request.mutable_stopping()->set_max_tokens(40);
  request.mutable_stopping()->set_ignore_eos(true);
  const CallResult free_run = Complete(*stub_, request);
  ASSERT_TRUE(free_run.status.ok()) << free_run.status.error_message();
  const std::string text = free_run.merged.text();
  ASSERT_GE(text.size(), 12u);
  // A stop string from the middle of the free-running output.
  const std::string stop = text.substr(text.size() / 2, 3);
  request.mutable_stopping()->add_stop(stop);
  const CallResult streamed = Stream(*stub_, request);
  const CallResult unary = Complete(*stub_, request);
  ASSERT_TRUE(streamed.status.ok()) << streamed.status.error_message();
  ASSERT_TRUE(unary.status.ok());
  ExpectSameOutput(streamed.merged, unary.merged);
  EXPECT_EQ(streamed.merged.finish_reason(), v1::FINISH_REASON_STOP);
  EXPECT_EQ(streamed.merged.text(), text.substr(0, text.find(stop)));
  EXPECT_LT(streamed.merged.token_ids_size(), 40);
}

TEST_F(GenerateTest, TokenizeDetokenizeAndModelInfo) {
  grpc::ClientContext c1, c2, c3;
  v1::TokenizeRequest tokenize;
  tokenize.set_text("hello world");
  v1::TokenizeResponse ids;
  ASSERT_TRUE(stub_->Tokenize(&c1, tokenize, &ids).ok());
  EXPECT_GT(ids.token_ids_size(), 0);
  EXPECT_LT(ids.token_ids_size(), 11);  // merges apply
  v1::DetokenizeRequest detokenize;
  *detokenize.mutable_token_ids() = ids.token_ids();
  v1::DetokenizeResponse text;
  ASSERT_TRUE(stub_->Detokenize(&c2, detokenize, &text).ok());
  EXPECT_EQ(text.text(), "hello world");
  v1::ModelInfoResponse info;
  ASSERT_TRUE(stub_->ModelInfo(&c3, v1::ModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_EQ(info.context_length(), 512);
  EXPECT_EQ(info.vocab_size(), 384);
  EXPECT_EQ(info.weights_dtype(), "float32");
  EXPECT_EQ(info.tensor_parallel_size(), 1);
  EXPECT_EQ(info.pipeline_parallel_size(), 1);
  EXPECT_TRUE(info.has_tokenizer());
  EXPECT_GT(info.limits().kv_cache_blocks(), 0);
  EXPECT_EQ(info.limits().max_top_logprobs(), 20);
  EXPECT_EQ(server_->Health(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// Long requests, cancelled by their clients after the first tokens: each call ends CANCELLED,
// the engine drops them (counted as cancelled) and every KV cache block returns to the pool.
TEST_F(GenerateTest, CancellationMidStreamFreesBlocks) {
  constexpr int kStreams = 8, kMaxTokens = 470;
  const double cancelled_before = server_->Metric("llm_requests_finished_total{finish_reason=\"cancelled\"}");
  const double generated_before = server_->Metric("llm_generated_tokens_total");
  std::vector<grpc::ClientContext> contexts(kStreams);
  std::vector<grpc::Status> statuses(kStreams);
  std::vector<int> received(kStreams, 0);
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i)
    threads.emplace_back([&, i] {
      auto stub = server_->NewStub();
      std::vector<int32_t> prompt(32);
      for (int j = 0; j < 32; ++j) prompt[j] = (i * 31 + j * 7) % 384;
      auto reader = stub->Generate(&contexts[i], GreedyIds(prompt, kMaxTokens));
      v1::GenerateResponse part;
      while (reader->Read(&part)) {
        if (received[i] == 0) started.fetch_add(1);
        received[i] += part.token_ids_size();
      }
      statuses[i] = reader->Finish();
    });
  ASSERT_TRUE(WaitFor([&] { return started.load() == kStreams; }, absl::Seconds(30)));
  EXPECT_GT(server_->Metric("llm_kv_cache_blocks_used"), 0);
  for (auto& context : contexts) context.TryCancel();
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::CANCELLED) << i;
    EXPECT_LT(received[i], kMaxTokens) << i;
  }
  EXPECT_TRUE(WaitFor(
      [&] {
        const auto m = server_->Metrics();
        return m.at("llm_kv_cache_blocks_used") == 0 && m.at("llm_requests_running") == 0 &&
               m.at("llm_requests_finished_total{finish_reason=\"cancelled\"}") ==
                   cancelled_before + kStreams;
      },
      absl::Seconds(5)))
      << "blocks still held or requests not counted as cancelled";
  EXPECT_LT(server_->Metric("llm_generated_tokens_total") - generated_before, kStreams * kMaxTokens);
}

TEST_F(GenerateTest, ExpiredDeadlinesEndWithDeadlineExceeded) {
  // Already expired when sent.
  const CallResult expired = Stream(*stub_, GreedyIds({1, 2, 3}, 10), absl::Milliseconds(-1));
  EXPECT_EQ(expired.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // Expiring mid-generation: the requests stop early and free their blocks.
  // The engine may see the deadline pass, or gRPC may cancel the call first: either way the
  // request ends early and frees its blocks.
  const auto ended = [&] {
    const auto m = server_->Metrics();
    return m.at("llm_requests_finished_total{finish_reason=\"deadline\"}") +
           m.at("llm_requests_finished_total{finish_reason=\"cancelled\"}");
  };
  const double ended_before = ended();
  constexpr int kCalls = 4;
  std::vector<CallResult> results(kCalls);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCalls; ++i)
    threads.emplace_back([&, i] {
      auto stub = server_->NewStub();
      results[i] = Stream(*stub, GreedyIds({5, 6, 7, 8, i}, 480), absl::Milliseconds(60));
    });
  for (std::thread& t : threads) t.join();
  for (const CallResult& r : results) {
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << r.status.error_message();
    EXPECT_LT(r.merged.token_ids_size(), 480);
  }
  EXPECT_TRUE(WaitFor(
      [&] {
        const auto m = server_->Metrics();
        return m.at("llm_kv_cache_blocks_used") == 0 && ended() == ended_before + kCalls;
      },
      absl::Seconds(5)));
}

// Server reflection lists the API and serves its descriptor (what grpcurl and grpc_cli use).
TEST_F(GenerateTest, ReflectionDescribesTheApi) {
  namespace reflection = grpc::reflection::v1alpha;
  auto stub = reflection::ServerReflection::NewStub(server_->channel());
  grpc::ClientContext context;
  auto stream = stub->ServerReflectionInfo(&context);
  reflection::ServerReflectionRequest list;
  list.set_list_services("");
  reflection::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Write(list));
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& service : response.list_services_response().service()) services.push_back(service.name());
  EXPECT_NE(std::find(services.begin(), services.end(), "llm.v1.Llm"), services.end())
      << absl::StrJoin(services, ", ");
  reflection::ServerReflectionRequest file;
  file.set_file_containing_symbol("llm.v1.Llm");
  ASSERT_TRUE(stream->Write(file));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_GT(response.file_descriptor_response().file_descriptor_proto_size(), 0);
  google::protobuf::FileDescriptorProto descriptor;
  ASSERT_TRUE(descriptor.ParseFromString(response.file_descriptor_response().file_descriptor_proto(0)));
  EXPECT_EQ(descriptor.package(), "llm.v1");
  ASSERT_EQ(descriptor.service_size(), 1);
  EXPECT_EQ(descriptor.service(0).method_size(), 6);  // Generate, Complete, Chat, Tokenize, Detokenize, ModelInfo
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

// Reflection v1 (what grpcurl asks first) answers as v1alpha does: the same service list, and the
// same descriptor of the file holding llm.v1.Llm.
TEST_F(GenerateTest, ReflectionV1AnswersAsV1alpha) {
  namespace alpha = grpc::reflection::v1alpha;
  namespace v1r = grpc::reflection::v1;
  auto alpha_stub = alpha::ServerReflection::NewStub(server_->channel());
  auto v1_stub = v1r::ServerReflection::NewStub(server_->channel());
  grpc::ClientContext alpha_context, v1_context;
  auto alpha_stream = alpha_stub->ServerReflectionInfo(&alpha_context);
  auto v1_stream = v1_stub->ServerReflectionInfo(&v1_context);
  v1r::ServerReflectionRequest list;
  list.set_list_services("*");
  v1r::ServerReflectionResponse v1_response;
  ASSERT_TRUE(v1_stream->Write(list));
  ASSERT_TRUE(v1_stream->Read(&v1_response));
  std::vector<std::string> services;
  for (const auto& service : v1_response.list_services_response().service()) services.push_back(service.name());
  for (const char* name : {"llm.v1.Llm", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
                           "grpc.reflection.v1alpha.ServerReflection"})
    EXPECT_NE(std::find(services.begin(), services.end(), name), services.end()) << name;
  alpha::ServerReflectionRequest alpha_file;
  alpha_file.set_file_containing_symbol("llm.v1.GenerateRequest");
  alpha::ServerReflectionResponse alpha_response;
  ASSERT_TRUE(alpha_stream->Write(alpha_file));
  ASSERT_TRUE(alpha_stream->Read(&alpha_response));
  v1r::ServerReflectionRequest v1_file;
  v1_file.set_file_containing_symbol("llm.v1.GenerateRequest");
  ASSERT_TRUE(v1_stream->Write(v1_file));
  ASSERT_TRUE(v1_stream->Read(&v1_response));
  ASSERT_GT(alpha_response.file_descriptor_response().file_descriptor_proto_size(), 0);
  const auto& v1_files = v1_response.file_descriptor_response().file_descriptor_proto();
  EXPECT_NE(std::find(v1_files.begin(), v1_files.end(), alpha_response.file_descriptor_response().file_descriptor_proto(0)),
            v1_files.end());
  v1r::ServerReflectionRequest missing;
  missing.set_file_containing_symbol("no.such.Symbol");
  ASSERT_TRUE(v1_stream->Write(missing));
  ASSERT_TRUE(v1_stream->Read(&v1_response));
  EXPECT_EQ(v1_response.error_response().error_code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  alpha_stream->WritesDone();
  v1_stream->WritesDone();
  EXPECT_TRUE(alpha_stream->Finish().ok());
  EXPECT_TRUE(v1_stream->Finish().ok());
}

// Runs `command` and returns its exit code and stdout.
std::pair<int, std::string> RunCommand(const std::string& command) {
  FILE* p = popen(command.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The C++ client prints, with --json, the same result as a direct call, streamed and unary.
void ExpectCppClientMatches(const std::string& client, const std::string& address, v1::Llm::Stub& stub) {
  const CallResult expected = Complete(stub, GreedyIds({10, 20, 30, 40}, 12));
  ASSERT_TRUE(expected.status.ok());
  for (const char* mode : {"", " --unary"}) {
    const std::string cmd =
        absl::StrCat(client, " generate --server ", address,
                     " --prompt-ids 10,20,30,40 --max-tokens 12 --temperature 0 --ignore-eos --json", mode);
    const auto [code, out] = RunCommand(cmd);
    ASSERT_EQ(code, 0) << cmd;
    const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << out;
    EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), Ids(expected.merged));
    EXPECT_EQ(j["text"], expected.merged.text());
    EXPECT_EQ(j["finish_reason"], "length");
    EXPECT_EQ(j["usage"]["completion_tokens"], 12);
  }
}

TEST_F(GenerateTest, ExampleCppClientPrintsTheSameResult) {
  ExpectCppClientMatches(absl::StrCat(LLM_BINARY_DIR, "/bin/llm_client"), server_->address(), *stub_);
  const auto [code, out] =
      RunCommand(absl::StrCat(LLM_BINARY_DIR, "/bin/llm_client health --server ", server_->address()));
  EXPECT_EQ(code, 0);
  EXPECT_EQ(out, "SERVING\n");
}

// The Python client (grpcio), when a python3 with grpcio is installed.
TEST_F(GenerateTest, ExamplePythonClientPrintsTheSameResult) {
  std::string python;
  for (const char* candidate : {"python3", "/usr/bin/python3"})
    if (RunCommand(absl::StrCat(candidate, " -c 'import grpc' 2>/dev/null")).first == 0) {
      python = candidate;
      break;
    }
  if (python.empty()) GTEST_SKIP() << "no python3 with grpcio here";
  const std::string client =
      absl::StrCat(python, " ", LLM_SOURCE_DIR, "/server/clients/python/llm_client.py");
  const auto [code, out] = RunCommand(absl::StrCat(client, " --server ", server_->address(), " health"));
  if (code != 0 && out.empty()) GTEST_SKIP() << "the Python client cannot generate its stubs here";
  EXPECT_EQ(out, "SERVING\n");
  const std::string generate = absl::StrCat(client, " --server ", server_->address());
  const CallResult expected = Complete(*stub_, GreedyIds({10, 20, 30, 40}, 12));
  ASSERT_TRUE(expected.status.ok());
  for (const char* mode : {"", " --unary"}) {
    const auto [gen_code, gen_out] = RunCommand(absl::StrCat(
        generate, " generate --prompt-ids 10,20,30,40 --max-tokens 12 --temperature 0 --ignore-eos --json",
        mode));
    ASSERT_EQ(gen_code, 0);
    const nlohmann::json j = nlohmann::json::parse(gen_out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << gen_out;
    EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), Ids(expected.merged));
    EXPECT_EQ(j["text"], expected.merged.text());
  }
}

}  // namespace
}  // namespace llm::testing
