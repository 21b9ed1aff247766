// TcpChannel: framed messages over one TCP connection, every wait with a deadline; TcpListener
// accepts them. The control plane between a front end and the worker groups it launches
// (engine/distributed/worker_protocol.h), which run outside any MPI job of the front end's.
//
// Why TCP and not MPI or gRPC: the front end must outlive its workers, and MPI ties the fate of a
// connected job to its peers (a dead rank aborts the job, and MPI_Comm_connect/accept joins the
// two jobs' failure domains); gRPC would put HTTP/2 framing, a completion queue and its threads
// on every step. A socket carries a step in one write, and the kernel reports a dead peer at
// once (the connection closes when its process ends), so losing a worker group is seen in
// microseconds, not after a keep-alive timer. Nagle is off: a step message is never held back.
//
// A frame: u32 kind, u64 length, payload (little-endian). Thread safety: one thread may Send
// while another Receives; Shutdown may be called from any thread (it wakes both).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace llm {

class TcpChannel {
 public:
  // Connects to "host:port", retrying refused connections until `timeout` (the peer may not be
  // listening yet). Unavailable naming the address when it never answers.
  static absl::StatusOr<std::unique_ptr<TcpChannel>> Connect(const std::string& address, absl::Duration timeout);
  ~TcpChannel();
  TcpChannel(const TcpChannel&) = delete;
  TcpChannel& operator=(const TcpChannel&) = delete;

  // Sends one frame. DeadlineExceeded when the peer does not take it within `timeout` (its
  // receive buffer full: it stopped reading), Unavailable when the connection is gone. After a
  // failure the channel is closed: a frame cut in the middle would desynchronize the stream.
  absl::Status Send(uint32_t kind, std::string_view payload, absl::Duration timeout = absl::InfiniteDuration());
  // Receives one frame. Unavailable when the peer closed the connection (its process ended) or
  // after Shutdown, DeadlineExceeded when nothing complete arrived within `timeout`; both close
  // the channel. Frames over `max_bytes` are DataLoss.
  absl::Status Receive(uint32_t* kind, std::string* payload, absl::Duration timeout = absl::InfiniteDuration(),
                       uint64_t max_bytes = uint64_t{1} << 32);
  // Closes the connection for both directions: a blocked Send or Receive returns Unavailable.
  void Shutdown();
  bool closed() const { return closed_.load(std::memory_order_acquire); }
  // The peer's address ("127.0.0.1:40312").
  const std::string& peer() const { return peer_; }

 private:
  friend class TcpListener;
  TcpChannel(int fd, std::string peer);
  // Waits until the socket is readable/writable or `deadline`; false on timeout or shutdown.
  absl::Status WaitFor(short events, absl::Time deadline, const char* what);

  const int fd_;
  const std::string peer_;
  std::atomic<bool> closed_{false};
};

class TcpListener {
 public:
  // Listens on `host`:`port` (0: any free port). The address in errors says which.
  static absl::StatusOr<std::unique_ptr<TcpListener>> Listen(const std::string& host, int port);
  ~TcpListener();
  TcpListener(const TcpListener&) = delete;
  TcpListener& operator=(const TcpListener&) = delete;

  // Waits up to `timeout` for the next connection (DeadlineExceeded otherwise; Cancelled after
  // Interrupt).
  absl::StatusOr<std::unique_ptr<TcpChannel>> Accept(absl::Duration timeout);
  // Wakes a blocked Accept (any thread).
  void Interrupt();
  int port() const { return port_; }
  // "host:port" as a peer connects to it.
  std::string address() const;

 private:
  TcpListener(int fd, int wake_read, int wake_write, std::string host, int port);
  const int fd_;
  const int wake_read_, wake_write_;  // a pipe that Interrupt writes to
  const std::string host_;
  const int port_;
};

}  // namespace llm
