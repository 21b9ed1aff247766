#include "server/loadtest/progress_line.h"

#include <unistd.h>

#include <cstdio>

#include "absl/strings/str_format.h"

namespace llm::loadtest {

ProgressLine::ProgressLine(std::function<RunProgress()> poll, std::string label, absl::Duration interval)
    : poll_(std::move(poll)), label_(std::move(label)), interval_(interval), tty_(isatty(STDERR_FILENO)) {
  if (interval_ > absl::ZeroDuration()) thread_ = std::thread([this] { Loop(); });
}

ProgressLine::~ProgressLine() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string ProgressLine::Format(const std::string& label, const RunProgress& p) {
  std::string out = absl::StrFormat("[%s] %6.1fs", label, p.elapsed_s);
  if (p.planned > 0) {
    absl::StrAppendFormat(&out, "  sent %d/%d", p.sent, p.planned);
  } else {
    absl::StrAppendFormat(&out, "  sent %d (%.0f s run)", p.sent, p.duration_s);
  }
  absl::StrAppendFormat(&out, "  done %d  in flight %d  failed %d  %.1f out tok/s%s", p.done, p.in_flight,
                        p.failed, p.elapsed_s > 0 ? static_cast<double>(p.output_tokens) / p.elapsed_s : 0.0,
                        p.warming_up ? "  (warm-up)" : "");
  return out;
}

void ProgressLine::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  const absl::Duration every = tty_ ? interval_ : interval_ * 10;
  while (!cv_.wait_for(lock, absl::ToChronoNanoseconds(every), [this] { return done_; })) {
    const std::string line = Format(label_, poll_());
    if (tty_) {
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  const std::string line = Format(label_, poll_());
  std::fprintf(stderr, tty_ ? "\r\033[K%s\n" : "%s\n", line.c_str());
  std::fflush(stderr);
}

}  // namespace llm::loadtest
