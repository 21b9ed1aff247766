// loadtest_fake_server: the FakeLlmServer as a process, for benchmarking `llm loadtest` itself
// (benchmarks/loadtest/generator_bench.sh). Prints "listening on HOST:PORT" and serves until
// SIGTERM or SIGINT; then prints the Generate calls it answered and its CPU time.
#include <signal.h>
#include <sys/resource.h>

#include <cstdio>

#include "benchmarks/loadtest/fake_llm_server.h"
#include "server/cli/flags.h"

int main(int argc, char** argv) {
  llm::cli::FlagSet flags("",
                          "Serves llm.v1.Llm answering every Generate at once (a load-generator benchmark).",
                          "loadtest_fake_server");
  std::string host = "127.0.0.1";
  int64_t port = 0, tokens_per_message = 1;
  flags.String("host", &host, "address to listen on");
  flags.Int("port", &port, "port (0: any free port)");
  flags.Int("tokens-per-message", &tokens_per_message, "tokens in each streamed message");
  if (auto exit_code = llm::cli::HandleParse(flags, argc, argv)) return *exit_code;

  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // before gRPC starts its threads

  llm::loadtest::FakeServerOptions options;
  options.host = host;
  options.port = static_cast<int>(port);
  options.tokens_per_message = static_cast<int>(tokens_per_message);
  auto server = llm::loadtest::FakeLlmServer::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "loadtest_fake_server: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  std::printf("loadtest_fake_server: listening on %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("loadtest_fake_server: %lld Generate calls, %.2f CPU s\n",
              static_cast<long long>((*server)->generate_calls()),
              u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6);
  std::fflush(stdout);
  server->reset();
  return 0;
}
