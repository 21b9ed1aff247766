// MetricsHttpServer: a minimal HTTP/1.1 listener for Prometheus scrapes, over POSIX sockets.
// GET /metrics answers the rendered text exposition format; anything else is 404 (405 for other
// methods). One connection at a time, each closed after its response; a client that does not send
// its request within a few seconds is dropped.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"

namespace llm::server {

class MetricsHttpServer {
 public:
  // Listens on host:port (port 0: any free port) and serves until destroyed.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& host, int port,
                                                                  std::function<std::string()> render);
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer() = default;
  void Serve();
  void Answer(int fd);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int wake_fds_[2] = {-1, -1};  // a pipe: written to stop Serve()
  int port_ = 0;
  std::thread thread_;
};

}  // namespace llm::server
