#include "parallel/tcp_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/core/status.h"

namespace llm {
namespace {

constexpr size_t kHeaderBytes = sizeof(uint32_t) + sizeof(uint64_t);

std::string ErrnoText(int err) { return std::strerror(err); }

void ConfigureSocket(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  fcntl(fd, F_SETFD, FD_CLOEXEC);
}

std::string PeerName(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "?";
  return absl::StrCat(host, ":", port);
}

absl::Status SplitAddress(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  int port_number = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port_number) || port_number <= 0 ||
      port_number > 65535)
    return absl::InvalidArgumentError(absl::StrCat("'", address, "' is not HOST:PORT"));
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  *port = address.substr(colon + 1);
  return absl::OkStatus();
}

// Milliseconds poll() may wait before `deadline` (-1: forever), at most a second at a time so
// that a Shutdown racing with the poll is seen.
int PollMillis(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return 1000;
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now()) + 1;
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

}  // namespace

TcpChannel::TcpChannel(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {}

TcpChannel::~TcpChannel() { close(fd_); }

void TcpChannel::Shutdown() {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  ::shutdown(fd_, SHUT_RDWR);
}

absl::Status TcpChannel::WaitFor(short events, absl::Time deadline, const char* what) {
  for (;;) {
    if (closed()) return absl::UnavailableError(absl::StrCat("the connection to ", peer_, " is closed"));
    pollfd p{fd_, events, 0};
    const int rc = poll(&p, 1, PollMillis(deadline));
    if (rc > 0) return absl::OkStatus();  // ready, or an error the next call reports
    if (rc < 0 && errno != EINTR) return absl::InternalError(absl::StrCat("poll: ", ErrnoText(errno)));
    if (absl::Now() >= deadline) {
      Shutdown();
      return absl::DeadlineExceededError(absl::StrCat(what, " ", peer_, " took longer than the deadline"));
    }
  }
}

absl::Status TcpChannel::Send(uint32_t kind, std::string_view payload, absl::Duration timeout) {
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  char header[kHeaderBytes];
  const uint64_t length = payload.size();
  std::memcpy(header, &kind, sizeof kind);
  std::memcpy(header + sizeof kind, &length, sizeof length);
  size_t sent = 0;
  const size_t total = kHeaderBytes + payload.size();
  while (sent < total) {
    iovec parts[2];
    int n = 0;
    if (sent < kHeaderBytes) parts[n++] = {header + sent, kHeaderBytes - sent};
    const size_t from = sent > kHeaderBytes ? sent - kHeaderBytes : 0;
    if (from < payload.size()) parts[n++] = {const_cast<char*>(payload.data()) + from, payload.size() - from};
    msghdr msg{};
    msg.msg_iov = parts;
    msg.msg_iovlen = n;
    const ssize_t wrote = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (wrote > 0) {
      sent += static_cast<size_t>(wrote);
      continue;
    }
    if (wrote < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      RETURN_IF_ERROR(WaitFor(POLLOUT, deadline, "sending to"));
      continue;
    }
    const int err = errno;
    Shutdown();
    return absl::UnavailableError(absl::StrCat("the connection to ", peer_, " is gone (", ErrnoText(err), ")"));
  }
  return absl::OkStatus();
}

absl::Status TcpChannel::Receive(uint32_t* kind, std::string* payload, absl::Duration timeout, uint64_t max_bytes) {
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  auto read_exactly = [&](char* into, size_t bytes) -> absl::Status {
    size_t got = 0;
    while (got < bytes) {
      const ssize_t n = recv(fd_, into + got, bytes - got, 0);
      if (n > 0) {
        got += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) {
        Shutdown();
        return absl::UnavailableError(absl::StrCat(peer_, " closed the connection"));
      }
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        RETURN_IF_ERROR(WaitFor(POLLIN, deadline, "waiting for"));
        continue;
      }
      const int err = errno;
      Shutdown();
      return absl::UnavailableError(absl::StrCat("the connection to ", peer_, " is gone (", ErrnoText(err), ")"));
    }
    return absl::OkStatus();
  };
  char header[kHeaderBytes];
  RETURN_IF_ERROR(read_exactly(header, kHeaderBytes));
  uint64_t length = 0;
  std::memcpy(kind, header, sizeof *kind);
  std::memcpy(&length, header + sizeof *kind, sizeof length);
  if (length > max_bytes) {
    Shutdown();
    return absl::DataLossError(absl::StrCat(peer_, " sent a frame of ", length, " bytes (at most ", max_bytes, ")"));
  }
  payload->resize(length);
  return read_exactly(payload->data(), length);
}

absl::StatusOr<std::unique_ptr<TcpChannel>> TcpChannel::Connect(const std::string& address, absl::Duration timeout) {
  std::string host, port;
  RETURN_IF_ERROR(SplitAddress(address, &host, &port));
  const absl::Time deadline = absl::Now() + timeout;
  std::string last_error = "no address";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      last_error = gai_strerror(rc);
    } else {
      for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
        const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        // A blocking connect to a host that does not answer would take the kernel's minutes.
        const timeval limit = absl::ToTimeval(std::clamp(deadline - absl::Now(), absl::Milliseconds(100), absl::Seconds(5)));
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
        if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          const timeval none{};
          setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof none);
          freeaddrinfo(found);
          ConfigureSocket(fd);
          return std::unique_ptr<TcpChannel>(new TcpChannel(fd, address));
        }
        last_error = ErrnoText(errno);
        close(fd);
      }
      freeaddrinfo(found);
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::UnavailableError(absl::StrCat("cannot connect to ", address, ": ", last_error));
}

absl::StatusOr<std::unique_ptr<TcpListener>> TcpListener::Listen(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found); rc != 0)
    return absl::InvalidArgumentError(absl::StrCat("cannot listen on ", host, ":", port, ": ", gai_strerror(rc)));
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 16) == 0) {
      freeaddrinfo(found);
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      const int actual = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
      int wake[2];
      if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        close(fd);
        return absl::InternalError(absl::StrCat("pipe: ", ErrnoText(errno)));
      }
      return std::unique_ptr<TcpListener>(new TcpListener(fd, wake[0], wake[1], host, actual));
    }
    last_error = ErrnoText(errno);
    close(fd);
  }
  freeaddrinfo(found);
  return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port, ": ", last_error));
}

TcpListener::TcpListener(int fd, int wake_read, int wake_write, std::string host, int port)
    : fd_(fd), wake_read_(wake_read), wake_write_(wake_write), host_(std::move(host)), port_(port) {}

TcpListener::~TcpListener() {
  close(fd_);
  close(wake_read_);
  close(wake_write_);
}

std::string TcpListener::address() const {
  return host_.find(':') != std::string::npos ? absl::StrCat("[", host_, "]:", port_) : absl::StrCat(host_, ":", port_);
}

void TcpListener::Interrupt() { (void)!write(wake_write_, "x", 1); }

absl::StatusOr<std::unique_ptr<TcpChannel>> TcpListener::Accept(absl::Duration timeout) {
  const absl::Time deadline = timeout == absl::InfiniteDuration() ? absl::InfiniteFuture() : absl::Now() + timeout;
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_read_, POLLIN, 0}};
    const int rc = poll(p, 2, PollMillis(deadline));
    if (rc > 0 && (p[1].revents & POLLIN)) {
      char drain[64];
      while (read(wake_read_, drain, sizeof drain) > 0) {
      }
      return absl::CancelledError("stopped waiting for a connection");
    }
    if (rc > 0 && (p[0].revents & POLLIN)) {
      const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) {
        ConfigureSocket(fd);
        return std::unique_ptr<TcpChannel>(new TcpChannel(fd, PeerName(fd)));
      }
    }
    if (rc < 0 && errno != EINTR) return absl::InternalError(absl::StrCat("poll: ", ErrnoText(errno)));
    if (absl::Now() >= deadline)
      return absl::DeadlineExceededError(absl::StrCat("no connection to ", address(), " within the deadline"));
  }
}

}  // namespace llm
