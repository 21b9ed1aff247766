// `llm`: one binary, one subcommand per job.
#include <cstdio>
#include <cstring>
#include <string>

#include "server/cli/commands.h"
#include "server/cli/flags.h"

namespace {

constexpr char kUsage[] =
    "usage: llm <command> [flags]\n\n"
    "commands:\n"
    "  generate   generate text from a prompt with a local model\n"
    "  tokenize   print the token ids of text\n"
    "  serve      serve a model over gRPC, with Prometheus metrics\n"
    "  loadtest   load-test a server: latency percentiles, throughput, SLA goodput\n"
    "  chat-template  render a chat template on a conversation: text and token ids\n\n"
    "Run 'llm <command> --help' for the flags of a command, 'llm --version' for the version.\n";

struct Command {
  const char* name;
  int (*run)(int, char**);
};

constexpr Command kCommands[] = {
    {"generate", llm::cli::RunGenerate},
    {"tokenize", llm::cli::RunTokenize},
    {"serve", llm::cli::RunServe},
    {"loadtest", llm::cli::RunLoadtest},
    {"chat-template", llm::cli::RunChatTemplate},
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "version")) {
    std::printf("llm %s\n", llm::cli::VersionString().c_str());
    return 0;
  }
  for (const Command& c : kCommands)
    if (std::strcmp(argv[1], c.name) == 0) return c.run(argc - 1, argv + 1);
  std::fprintf(stderr, "llm: unknown command '%s'\n\n%s", argv[1], kUsage);
  return 2;
}
