#include "engine/distributed/worker_launcher.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "parallel/mpi_runtime.h"

extern char** environ;

namespace llm {
namespace {

// The session id of process `pid` (/proc/PID/stat: "pid (comm) state ppid pgrp session ...";
// comm may hold spaces and parentheses, so fields are counted after the last ')'); -1 if gone.
pid_t SessionOf(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string stat((std::istreambuf_iterator<char>(in)), {});
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  char state = 0;
  long ppid = 0, pgrp = 0, session = 0;
  if (std::sscanf(stat.c_str() + close + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &session) != 4) return -1;
  return static_cast<pid_t>(session);
}

// SIGKILL to every process whose session is `session`; how many were signalled.
int KillSession(pid_t session) {
  int killed = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid) || pid <= 1) continue;
    if (SessionOf(pid) == session && kill(pid, SIGKILL) == 0) ++killed;
  }
  closedir(proc);
  return killed;
}

std::string DescribeWait(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("was killed by signal ", WTERMSIG(status));
  return "ended";
}

}  // namespace

std::string ShellQuote(const std::string& argument) {
  std::string out = "'";
  for (char c : argument) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

absl::StatusOr<std::unique_ptr<WorkerGroupLauncher>> WorkerGroupLauncher::Start(
    const std::string& prefix, const std::vector<std::string>& command) {
  std::string line = "exec " + prefix;
  for (const std::string& arg : command) absl::StrAppend(&line, line.back() == ' ' ? "" : " ", ShellQuote(arg));
  // The child's environment, prepared before fork (no allocation after it). A front end that an MPI
  // launcher started itself carries that job's identity (OMPI_COMM_WORLD_*, PMIX_*, the launcher's
  // OMPI_MCA_* wiring), which would make the workers' launcher join it: then all of it goes. Else
  // the operator's settings stay (e.g. OMPI_MCA_plm_rsh_agent, which a machine without ssh needs).
  const bool inside_mpi_job = MpiRuntime::LaunchedByMpiLauncher();
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view var(*e);
    if (inside_mpi_job &&
        (absl::StartsWith(var, "OMPI_") || absl::StartsWith(var, "PMIX_") || absl::StartsWith(var, "PMI_")))
      continue;
    env_strings.emplace_back(var.data(), var.size());
  }
  std::vector<char*> env;
  for (std::string& s : env_strings) env.push_back(s.data());
  env.push_back(nullptr);
  std::string shell = "/bin/sh", dash_c = "-c";
  char* argv[] = {shell.data(), dash_c.data(), line.data(), nullptr};
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    setsid();  // a session of its own: Kill reaches every local process of the launch
    // The front end blocks its shutdown signals in every thread; the workers must not inherit that.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    execve(argv[0], argv, env.data());
    _exit(127);
  }
  return std::unique_ptr<WorkerGroupLauncher>(new WorkerGroupLauncher(pid, line.substr(5)));
}

WorkerGroupLauncher::~WorkerGroupLauncher() { Kill(); }

std::optional<std::string> WorkerGroupLauncher::Exited() {
  if (exit_) return exit_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) exit_ = DescribeWait(status);
  return exit_;
}

void WorkerGroupLauncher::Kill() {
  // Twice: a process forked while the first pass ran is caught by the second.
  for (int pass = 0; pass < 2; ++pass) KillSession(pid_);
  if (exit_) return;
  int status = 0;
  if (waitpid(pid_, &status, 0) == pid_) exit_ = DescribeWait(status);
}

}  // namespace llm
