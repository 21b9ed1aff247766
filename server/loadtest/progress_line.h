// ProgressLine: while a run goes on, a line on stderr with what was sent, what ended and the
// output token rate. On a terminal it is redrawn in place; otherwise a line is appended every
// interval (10x less often), so logs stay short.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "server/loadtest/load_runner.h"

namespace llm::loadtest {

class ProgressLine {
 public:
  ProgressLine(std::function<RunProgress()> poll, std::string label, absl::Duration interval);
  ~ProgressLine();  // stops and ends the line

  static std::string Format(const std::string& label, const RunProgress& p);

 private:
  void Loop();

  std::function<RunProgress()> poll_;
  std::string label_;
  absl::Duration interval_;
  bool tty_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace llm::loadtest
