#include "tests/server/server_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace llm::testing {
namespace {

// What can be read of `path` ("" when it cannot be opened). With read(2), not a stream: a /proc
// file of a process that exits while it is read fails with ESRCH, which libstdc++'s filebuf
// turns into an exception (seen: the survival test aborted while a worker was being killed).
std::string ReadFile(const std::string& path) {
  std::string bytes;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bytes;
  char buf[4096];
  for (ssize_t got; (got = read(fd, buf, sizeof(buf))) > 0;) bytes.append(buf, static_cast<size_t>(got));
  close(fd);
  return bytes;
}

// Reads lines from `fd` until one contains "llm serve: serving"; false on EOF or timeout.
bool WaitForServingLine(int fd, absl::Duration timeout, std::string* out) {
  const absl::Time give_up = absl::Now() + timeout;
  char buf[4096];
  while (out->find("llm serve: serving") == std::string::npos || out->back() != '\n') {
    const int64_t left_ms = absl::ToInt64Milliseconds(give_up - absl::Now());
    if (left_ms <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left_ms)) <= 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return false;
    out->append(buf, static_cast<size_t>(n));
  }
  return true;
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string request =
        absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    (void)!write(fd, request.data(), request.size());
    char buf[8192];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) response.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return response;
}

void Merge(const v1::GenerateResponse& part, v1::GenerateResponse* merged) {
  merged->set_request_id(part.request_id());
  merged->mutable_token_ids()->Add(part.token_ids().begin(), part.token_ids().end());
  merged->mutable_text()->append(part.text());
  merged->mutable_logprobs()->MergeFrom(part.logprobs());
  if (part.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    merged->set_finish_reason(part.finish_reason());
    *merged->mutable_usage() = part.usage();
    *merged->mutable_timings() = part.timings();
  }
}

// GPT-2's byte-level alphabet: printable bytes stand for themselves, the others for U+0100 on.
std::vector<std::string> ByteLevelSymbols() {
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  std::vector<std::string> symbols(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    symbols[b] = utf8(printable ? b : next++);
  }
  return symbols;
}

}  // namespace

std::unique_ptr<ServerProcess> ServerProcess::Start(const std::vector<std::string>& args) {
  return StartMpi(0, args);
}

std::unique_ptr<ServerProcess> ServerProcess::StartMpi(int ranks, const std::vector<std::string>& args) {
  auto server = std::unique_ptr<ServerProcess>(new ServerProcess());
  static int counter = 0;
  server->stderr_path_ = absl::StrCat(::testing::TempDir(), "/llm_serve_", getpid(), "_", counter++, ".log");
  std::vector<std::string> argv;
  if (ranks > 0)
    argv = {MPIEXEC_EXECUTABLE, "--oversubscribe", "--allow-run-as-root", "-np", std::to_string(ranks),
            "-x", "OMPI_MCA_btl_vader_single_copy_mechanism=none"};
  const std::vector<std::string> serve = {std::string(LLM_BINARY_DIR) + "/bin/llm",
                                          "serve",
                                          "--host",
                                          "127.0.0.1",
                                          "--port",
                                          "0",
                                          "--metrics-port",
                                          "0",
                                          "--http-port",
                                          "0",
                                          "--max-priority",
                                          "1",
                                          "--threads",
                                          ranks > 0 ? "1" : "2"};
  argv.insert(argv.end(), serve.begin(), serve.end());
  argv.insert(argv.end(), args.begin(), args.end());
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe";
    return nullptr;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    const int err = open(server->stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(err, STDERR_FILENO);
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  close(out[1]);
  server->pid_ = pid;
  std::string text;
  const bool up = WaitForServingLine(out[0], absl::Seconds(60), &text);
  close(out[0]);  // the server writes nothing more to stdout
  if (!up) {
    ADD_FAILURE() << "llm serve did not start: " << text << "\n" << server->Log();
    return nullptr;
  }
  std::smatch m;
  const std::regex grpc_re("on 127\\.0\\.0\\.1:([0-9]+);"),
      metrics_re("metrics http://127\\.0\\.0\\.1:([0-9]+)/");
  if (!std::regex_search(text, m, grpc_re) || !absl::SimpleAtoi(m[1].str(), &server->port_) ||
      !std::regex_search(text, m, metrics_re) || !absl::SimpleAtoi(m[1].str(), &server->metrics_port_)) {
    ADD_FAILURE() << "cannot read the ports from: " << text;
    return nullptr;
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxSendMessageSize(64 << 20);
  server->channel_ =
      grpc::CreateCustomChannel(server->address(), grpc::InsecureChannelCredentials(), channel_args);
  return server;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    // A front end's worker groups run in sessions of their own: they go too (stopped ranks included).
    for (int replica = 0; replica < 8; ++replica)
      for (const auto& [rank, pid] : WorkerRanks(replica)) kill(pid, SIGKILL);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string MpirunPrefix(int ranks) {
  return absl::StrCat(MPIEXEC_EXECUTABLE, " --oversubscribe --allow-run-as-root -np ", ranks,
                      " -x OMPI_MCA_btl_vader_single_copy_mechanism=none");
}

std::string ServerProcess::address() const { return absl::StrCat("127.0.0.1:", port_); }

std::map<std::string, double> ServerProcess::Metrics() const {
  const std::string response = HttpGet(metrics_port_, "/metrics");
  std::map<std::string, double> metrics;
  const size_t body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 200", 0) != 0 || body == std::string::npos) {
    ADD_FAILURE() << "bad /metrics response: " << response;
    return metrics;
  }
  for (absl::string_view line : absl::StrSplit(absl::string_view(response).substr(body + 4), '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    double value;
    if (space == absl::string_view::npos || !absl::SimpleAtod(line.substr(space + 1), &value)) continue;
    // Every sample carries the model's name; the tests name metrics without it.
    static const std::regex model_label("model_name=\"[^\"]*\",?");
    std::string name = std::regex_replace(std::string(line.substr(0, space)), model_label, "");
    if (absl::EndsWith(name, "{}")) name.resize(name.size() - 2);
    metrics[name] = value;
  }
  return metrics;
}

double ServerProcess::Metric(const std::string& name) const {
  const auto metrics = Metrics();
  const auto it = metrics.find(name);
  if (it == metrics.end()) {
    ADD_FAILURE() << "no metric " << name;
    return -1;
  }
  return it->second;
}

std::shared_ptr<grpc::Channel> NewClientChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::shared_ptr<grpc::Channel> ServerProcess::NewChannel() const { return NewClientChannel(address()); }

grpc::health::v1::HealthCheckResponse::ServingStatus ServerProcess::Health(
    const std::shared_ptr<grpc::Channel>& channel) const {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = grpc::health::v1::Health::NewStub(channel ? channel : channel_)->Check(
      &context, grpc::health::v1::HealthCheckRequest(), &response);
  return status.ok() ? response.status() : grpc::health::v1::HealthCheckResponse::UNKNOWN;
}

namespace {

// Fields after "(comm)" of /proc/PID/stat: state, ppid, pgrp, session.
bool ReadStat(int pid, int* ppid, int* session) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  char state = 0;
  int pgrp = 0;
  return close != std::string::npos &&
         std::sscanf(stat.c_str() + close + 1, " %c %d %d %d", &state, ppid, &pgrp, session) == 4;
}

std::vector<std::string> NulSeparated(const std::string& bytes) {
  std::vector<std::string> parts = absl::StrSplit(bytes, '\0', absl::SkipEmpty());
  return parts;
}

}  // namespace

std::map<int, pid_t> ServerProcess::WorkerRanks(int replica) const {
  std::vector<int> pids;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    int pid = 0;
    if (absl::SimpleAtoi(entry.path().filename().string(), &pid)) pids.push_back(pid);
  }
  std::vector<int> launchers;
  for (int pid : pids) {
    int ppid = 0, session = 0;
    if (ReadStat(pid, &ppid, &session) && ppid == pid_) launchers.push_back(pid);
  }
  std::map<int, pid_t> newest;
  int newest_generation = -1;
  for (int pid : pids) {
    int ppid = 0, session = 0;
    if (!ReadStat(pid, &ppid, &session) ||
        std::find(launchers.begin(), launchers.end(), session) == launchers.end())
      continue;
    const std::vector<std::string> args = NulSeparated(ReadFile(absl::StrCat("/proc/", pid, "/cmdline")));
    if (std::find(args.begin(), args.end(), "worker") == args.end()) continue;
    int this_replica = -1, generation = -1;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--replica") (void)absl::SimpleAtoi(args[i + 1], &this_replica);
      if (args[i] == "--generation") (void)absl::SimpleAtoi(args[i + 1], &generation);
    }
    if (this_replica != replica || generation < newest_generation) continue;
    if (generation > newest_generation) {
      newest.clear();
      newest_generation = generation;
    }
    int rank = 0;
    for (const std::string& var : NulSeparated(ReadFile(absl::StrCat("/proc/", pid, "/environ"))))
      if (absl::StartsWith(var, "OMPI_COMM_WORLD_RANK=")) (void)absl::SimpleAtoi(var.substr(21), &rank);
    newest[rank] = pid;
  }
  return newest;
}

bool ServerProcess::HttpHealthy() const { return HttpGet(metrics_port_, "/health").rfind("HTTP/1.1 200", 0) == 0; }

void ServerProcess::Signal(int sig) const { kill(pid_, sig); }

int ServerProcess::WaitForExit(absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (absl::Now() < give_up) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return -1;
}

std::string ServerProcess::Log() const { return ReadFile(stderr_path_); }

CallResult Stream(v1::Llm::Stub& stub, const v1::GenerateRequest& request, absl::Duration timeout) {
  CallResult result;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse part;
  while (reader->Read(&part)) {
    Merge(part, &result.merged);
    result.parts.push_back(part);
  }
  result.status = reader->Finish();
  return result;
}

CallResult Complete(v1::Llm::Stub& stub, const v1::GenerateRequest& request, absl::Duration timeout) {
  CallResult result;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  result.status = stub.Complete(&context, request, &result.merged);
  if (result.status.ok()) result.parts.push_back(result.merged);
  return result;
}

v1::GenerateRequest GreedyIds(const std::vector<int32_t>& prompt, int max_tokens) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
  r.mutable_sampling()->set_temperature(0.0f);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  r.mutable_stopping()->set_ignore_eos(true);
  return r;
}

std::vector<int32_t> Ids(const v1::GenerateResponse& response) {
  return std::vector<int32_t>(response.token_ids().begin(), response.token_ids().end());
}

std::string TokenizerModelDir() {
  static std::once_flag once;
  static std::string dir;
  std::call_once(once, [] {
    namespace fs = std::filesystem;
    dir = absl::StrCat(::testing::TempDir(), "/llama-tiny-text-", getpid());
    fs::create_directories(dir);
    const fs::path fixture = fs::path(LLM_TEST_DATA_DIR) / "models" / "llama-tiny";
    for (const char* file : {"config.json", "generation_config.json", "model.safetensors"}) {
      fs::remove(fs::path(dir) / file);
      fs::create_symlink(fixture / file, fs::path(dir) / file);
    }
    const std::vector<std::string> bytes = ByteLevelSymbols();
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[bytes[b]] = b;
    nlohmann::json merges = nlohmann::json::array();
    int next_id = 256;
    auto add_merge = [&](const std::string& a, const std::string& b) {
      if (next_id >= 383 || vocab.contains(a + b)) return;
      merges.push_back(a + " " + b);
      vocab[a + b] = next_id++;
    };
    for (char c = 'a'; c <= 'z'; ++c) add_merge(bytes[' '], std::string(1, c));
    const std::string frequent = "etaoinshrdlcumwfgypb";
    for (char a : frequent)
      for (char b : frequent) add_merge(std::string(1, a), std::string(1, b));
    nlohmann::json tokenizer = {
        {"version", "1.0"},
        {"added_tokens",
         {{{"id", 383},
           {"content", "<|end|>"},
           {"special", true},
           {"lstrip", false},
           {"rstrip", false},
           {"single_word", false},
           {"normalized", false}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"unk_token", nullptr}, {"vocab", vocab}, {"merges", merges}}}};
    std::ofstream(fs::path(dir) / "tokenizer.json") << tokenizer.dump();
    std::atexit([] { std::filesystem::remove_all(dir); });
  });
  return dir;
}

bool WaitFor(const std::function<bool()>& condition, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

}  // namespace llm::testing
