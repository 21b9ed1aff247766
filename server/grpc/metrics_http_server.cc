#include "server/grpc/metrics_http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace llm::server {
namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr int kClientTimeoutMs = 3000;

void SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

std::string Response(int code, const char* reason, const std::string& content_type, const std::string& body) {
  return absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                      "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
}

// Reads until the end of the request head; false on timeout, EOF or an oversized head.
bool ReadRequestHead(int fd, std::string* head) {
  char buf[1024];
  while (head->find("\r\n\r\n") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, kClientTimeoutMs) <= 0) return false;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    head->append(buf, static_cast<size_t>(n));
    if (head->size() > kMaxRequestBytes) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& host, int port, std::function<std::string()> render) {
  if (port < 0 || port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("metrics port ", port, " is outside [0, 65535]"));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const std::string port_text = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &addresses);
      rc != 0)
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", host, "': ", gai_strerror(rc)));
  auto server = std::unique_ptr<MetricsHttpServer>(new MetricsHttpServer());
  std::string error = "no address";
  for (addrinfo* a = addresses; a && server->listen_fd_ < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) {
      server->listen_fd_ = fd;
    } else {
      error = std::strerror(errno);
      close(fd);
    }
  }
  freeaddrinfo(addresses);
  if (server->listen_fd_ < 0)
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", host, ":", port, ": ", error));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(server->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  server->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                    : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (pipe2(server->wake_fds_, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  server->render_ = std::move(render);
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

MetricsHttpServer::~MetricsHttpServer() {
  if (thread_.joinable()) {
    const char stop = 1;
    (void)!write(wake_fds_[1], &stop, 1);
    thread_.join();
  }
  for (int fd : {listen_fd_, wake_fds_[0], wake_fds_[1]})
    if (fd >= 0) close(fd);
}

void MetricsHttpServer::Serve() {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fds_[0], POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Answer(fd);
    close(fd);
  }
}

void MetricsHttpServer::Answer(int fd) {
  std::string head;
  if (!ReadRequestHead(fd, &head)) return;
  const std::string line = head.substr(0, head.find("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos) {
    SendAll(fd, Response(400, "Bad Request", "text/plain", "bad request line\n"));
    return;
  }
  const std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  if (method != "GET" && method != "HEAD") {
    SendAll(fd, Response(405, "Method Not Allowed", "text/plain", "only GET\n"));
    return;
  }
  std::string response;
  if (path == "/metrics")
    response = Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_());
  else
    response = Response(404, "Not Found", "text/plain", "metrics are at /metrics\n");
  if (method == "HEAD") response = response.substr(0, response.find("\r\n\r\n") + 4);
  SendAll(fd, response);
}

}  // namespace llm::server
