// The `llm` subcommands. Each takes its own argv (argv[0] is the subcommand name) and returns the
// process exit code: 0 success, 1 a runtime failure, 2 bad usage or bad input.
#pragma once

namespace llm::cli {

int RunGenerate(int argc, char** argv);
int RunTokenize(int argc, char** argv);
int RunServe(int argc, char** argv);
int RunLoadtest(int argc, char** argv);
int RunChatTemplate(int argc, char** argv);
int RunWorker(int argc, char** argv);

}  // namespace llm::cli
