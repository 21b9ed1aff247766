// HttpServer: an HTTP/1.1 listener (Boost.Beast on Asio) for the OpenAI-compatible API and the
// Prometheus metrics. Every connection is asynchronous: an idle, slow or stalled client holds a
// socket and a few kilobytes, never a thread, so /health and /metrics answer at once whatever
// other clients do (benchmarks/http/README.md has the measurement that chose this library).
//
// A handler gets the request and an HttpResponder, which it may keep and use from any thread (the
// engine's output threads do): it sends one whole response, or the head of a streamed response
// followed by chunks (chunked transfer encoding, as server-sent events need). Nothing it does
// blocks: writes are queued and run on the connection's strand, one at a time, merging what
// arrived meanwhile. When the client goes away before the response ends, the responder's close
// callback runs once (the handler cancels its engine requests there).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace llm::server {

struct HttpRequest {
  std::string method;                          // "GET", "POST", ...
  std::string path;                            // the target without its query string
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;

  // The header's value, or "" when absent.
  std::string Header(const std::string& lower_case_name) const;
};

class HttpResponder {
 public:
  virtual ~HttpResponder() = default;

  // The whole response (Content-Length). Later calls are ignored.
  virtual void Send(int status, const std::string& content_type, std::string body) = 0;
  // The head of a streamed response (chunked); then Write any number of times, then End.
  virtual void StartStream(int status, const std::string& content_type) = 0;
  virtual void Write(std::string data) = 0;
  virtual void End() = 0;
  // `on_close` runs once, on an I/O thread, if the client disconnects (or stops reading for the
  // write timeout) before the response ended; at once when that happened already.
  virtual void OnClose(std::function<void()> on_close) = 0;
};

using HttpHandler = std::function<void(HttpRequest request, std::shared_ptr<HttpResponder> responder)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  // TLS when both are set: PEM files of the certificate (chain) and its private key.
  std::string tls_cert_file;
  std::string tls_key_file;
  int io_threads = 2;
  // A request (head and body) must arrive within this; an idle keep-alive connection is closed
  // after it. A slow or silent client is dropped then, having cost only its socket meanwhile.
  absl::Duration request_timeout = absl::Seconds(30);
  // A response write that makes no progress for this long (the client stopped reading) closes
  // the connection.
  absl::Duration write_timeout = absl::Seconds(60);
  size_t max_body_bytes = 32 << 20;
};

class HttpServer {
 public:
  // Binds (SO_REUSEADDR for TIME_WAIT only; no SO_REUSEPORT, so an occupied port is an error:
  // "address already in use") and starts serving `handler`, which must be thread-safe.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options, HttpHandler handler);
  ~HttpServer();  // Stop()

  int port() const;
  bool tls() const;
  // "http://host:port" or "https://host:port".
  std::string url() const;
  // Stops accepting, closes every connection and joins the I/O threads.
  void Stop();

  class Impl;

 private:
  HttpServer() = default;
  std::shared_ptr<Impl> shared_;  // connections hold references too; see Stop()
};

}  // namespace llm::server
