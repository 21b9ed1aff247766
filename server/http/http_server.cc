#include "server/http/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cerrno>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace llm::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

std::string HttpRequest::Header(const std::string& lower_case_name) const {
  auto it = headers.find(lower_case_name);
  return it == headers.end() ? std::string() : it->second;
}

namespace {

// How often a connection whose response is pending checks whether its client hung up: a
// disconnect cancels the request's generation within this (plus one engine step).
constexpr auto kCloseCheckInterval = std::chrono::milliseconds(200);

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(absl::ToChronoNanoseconds(d));
}

std::string Head(int status, const std::string& content_type, std::optional<size_t> content_length,
                 bool keep_alive) {
  const auto reason = http::obsolete_reason(static_cast<http::status>(status));
  std::string head = absl::StrCat("HTTP/1.1 ", status, " ", std::string(reason.data(), reason.size()),
                                  "\r\nServer: llm\r\nContent-Type: ", content_type, "\r\n");
  if (content_length) {
    absl::StrAppend(&head, "Content-Length: ", *content_length, "\r\n");
  } else {
    // Streamed: chunks as they come, no intermediary buffering (SSE).
    absl::StrAppend(&head, "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n");
  }
  absl::StrAppend(&head, "Connection: ", keep_alive ? "keep-alive" : "close", "\r\n\r\n");
  return head;
}

}  // namespace

// What an HttpResponder needs of its connection; every method runs on the connection's strand.
class SessionBase : public std::enable_shared_from_this<SessionBase> {
 public:
  virtual ~SessionBase() = default;
  virtual void Post(std::function<void()> fn) = 0;
  virtual void DoSend(uint64_t exchange, int status, const std::string& content_type, std::string body) = 0;
  virtual void DoStartStream(uint64_t exchange, int status, const std::string& content_type) = 0;
  virtual void DoWrite(uint64_t exchange, std::string data) = 0;
  virtual void DoEnd(uint64_t exchange) = 0;
  virtual void DoOnClose(uint64_t exchange, std::function<void()> on_close) = 0;
  virtual void Close() = 0;
};

class HttpServer::Impl : public std::enable_shared_from_this<HttpServer::Impl> {
 public:
  Impl(HttpServerOptions options, HttpHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)), acceptor_(ioc_) {}

  absl::Status Listen();
  void Run();
  void Stop();
  bool stopped() const { return stopped_.load(); }

  const HttpServerOptions& options() const { return options_; }
  const HttpHandler& handler() const { return handler_; }
  int port() const { return port_; }
  bool tls() const { return ssl_ctx_.has_value(); }

  void Register(const std::shared_ptr<SessionBase>& session) {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    sessions_.insert(session);
  }
  void Unregister(const std::shared_ptr<SessionBase>& session) {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    sessions_.erase(session);
  }

 private:
  void Accept();

  HttpServerOptions options_;
  HttpHandler handler_;
  net::io_context ioc_;
  std::optional<ssl::context> ssl_ctx_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  std::atomic<bool> stopped_{false};
  std::mutex sessions_mu_;
  std::set<std::weak_ptr<SessionBase>, std::owner_less<std::weak_ptr<SessionBase>>> sessions_;
};

namespace {

// One exchange (request -> response) of a connection; stale calls (after the response ended and
// the connection moved on to its next request) are ignored by the session.
class Exchange final : public HttpResponder {
 public:
  Exchange(std::shared_ptr<HttpServer::Impl> server, std::shared_ptr<SessionBase> session, uint64_t serial)
      : server_(std::move(server)), session_(std::move(session)), serial_(serial) {}

  void Send(int status, const std::string& content_type, std::string body) override {
    Post([s = session_, n = serial_, status, content_type, body = std::move(body)]() mutable {
      s->DoSend(n, status, content_type, std::move(body));
    });
  }
  void StartStream(int status, const std::string& content_type) override {
    Post([s = session_, n = serial_, status, content_type] { s->DoStartStream(n, status, content_type); });
  }
  void Write(std::string data) override {
    Post([s = session_, n = serial_, data = std::move(data)]() mutable { s->DoWrite(n, std::move(data)); });
  }
  void End() override {
    Post([s = session_, n = serial_] { s->DoEnd(n); });
  }
  void OnClose(std::function<void()> on_close) override {
    Post([s = session_, n = serial_, f = std::move(on_close)]() mutable { s->DoOnClose(n, std::move(f)); });
  }

 private:
  // After Stop nothing runs on the I/O threads any more: a queued task would only keep the
  // session (and so the server's io_context) alive.
  void Post(std::function<void()> fn) {
    if (!server_->stopped()) session_->Post(std::move(fn));
  }

  std::shared_ptr<HttpServer::Impl> server_;
  std::shared_ptr<SessionBase> session_;
  const uint64_t serial_;
};

template <class Stream>
class Session final : public SessionBase {
 public:
  template <class... Args>
  Session(std::shared_ptr<HttpServer::Impl> server, tcp::socket socket, Args&&... args)
      : server_(std::move(server)),
        stream_(std::move(socket), std::forward<Args>(args)...),
        close_timer_(stream_.get_executor()) {}

  void Start() {
    server_->Register(shared_from_this());
    Post([self = Self()] {
      if constexpr (kTls) {
        beast::get_lowest_layer(self->stream_).expires_after(ToChrono(self->server_->options().request_timeout));
        self->stream_.async_handshake(ssl::stream_base::server, [self](beast::error_code ec) {
          if (ec) return self->Close();
          self->ReadRequest();
        });
      } else {
        self->ReadRequest();
      }
    });
  }

  void Post(std::function<void()> fn) override { net::post(stream_.get_executor(), std::move(fn)); }

  void DoSend(uint64_t exchange, int status, const std::string& content_type, std::string body) override {
    if (!Current(exchange) || responded_) return;
    responded_ = true;
    ended_ = true;
    pending_ = Head(status, content_type, body.size(), keep_alive_) + body;
    Flush();
  }

  void DoStartStream(uint64_t exchange, int status, const std::string& content_type) override {
    if (!Current(exchange) || responded_) return;
    responded_ = true;
    streaming_ = true;
    pending_ = Head(status, content_type, std::nullopt, keep_alive_);
    Flush();
  }

  void DoWrite(uint64_t exchange, std::string data) override {
    if (!Current(exchange) || !streaming_ || ended_ || data.empty()) return;
    absl::StrAppend(&pending_, absl::Hex(data.size()), "\r\n", data, "\r\n");
    Flush();
  }

  void DoEnd(uint64_t exchange) override {
    if (!Current(exchange) || !streaming_ || ended_) return;
    ended_ = true;
    pending_ += "0\r\n\r\n";
    Flush();
  }

  void DoOnClose(uint64_t exchange, std::function<void()> on_close) override {
    if (exchange != serial_ || !handling_) return;  // the response went out: nothing to cancel
    if (gone_) {
      on_close();
      return;
    }
    on_close_ = std::move(on_close);
  }

  void Close() override {
    if (closed_) return;
    closed_ = true;
    ClientGone();
    close_timer_.cancel();
    beast::error_code ec;
    beast::get_lowest_layer(stream_).socket().shutdown(tcp::socket::shutdown_both, ec);
    beast::get_lowest_layer(stream_).close();
    server_->Unregister(shared_from_this());
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  std::shared_ptr<Session> Self() { return std::static_pointer_cast<Session>(shared_from_this()); }
  bool Current(uint64_t exchange) const { return exchange == serial_ && handling_ && !closed_; }

  void ReadRequest() {
    parser_.emplace();
    parser_->body_limit(server_->options().max_body_bytes);
    beast::get_lowest_layer(stream_).expires_after(ToChrono(server_->options().request_timeout));
    http::async_read(stream_, buffer_, *parser_, [self = Self()](beast::error_code ec, size_t) {
      if (ec == http::error::body_limit) return self->Reject(413, "request body too large");
      if (ec) return self->Close();
      self->Dispatch();
    });
  }

  // A request the parser refused: answered, then the connection closes.
  void Reject(int status, const std::string& message) {
    handling_ = true;
    keep_alive_ = false;
    ++serial_;
    DoSend(serial_, status, "application/json",
           absl::StrCat(R"({"error":{"message":")", message, R"(","type":"invalid_request_error","param":null,"code":null}})"));
  }

  void Dispatch() {
    http::request<http::string_body> message = parser_->release();
    parser_.reset();
    beast::get_lowest_layer(stream_).expires_never();
    HttpRequest request;
    request.method = std::string(message.method_string());
    std::string target(message.target());
    request.path = target.substr(0, target.find('?'));
    for (const auto& field : message)
      request.headers[absl::AsciiStrToLower(std::string(field.name_string()))] = std::string(field.value());
    request.body = std::move(message.body());
    keep_alive_ = message.keep_alive();
    handling_ = true;
    responded_ = streaming_ = ended_ = gone_ = false;
    const uint64_t serial = ++serial_;
    WatchForClose();
    server_->handler()(std::move(request), std::make_shared<Exchange>(server_, shared_from_this(), serial));
  }

  // While a response is pending, checks now and then whether the client hung up (a read of 0
  // bytes), without consuming anything it may have sent (a pipelined request).
  void WatchForClose() {
    close_timer_.expires_after(kCloseCheckInterval);
    close_timer_.async_wait([self = Self()](beast::error_code ec) {
      if (ec || self->closed_ || !self->handling_) return;
      char byte;
      const int fd = beast::get_lowest_layer(self->stream_).socket().native_handle();
      const ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return self->Close();
      self->WatchForClose();
    });
  }

  void ClientGone() {
    if (!handling_ || gone_) return;
    gone_ = true;
    if (on_close_) {
      auto f = std::move(on_close_);
      on_close_ = nullptr;
      f();
    }
  }

  void Flush() {
    if (writing_ || pending_.empty() || closed_) return;
    writing_ = true;
    in_flight_.swap(pending_);
    pending_.clear();
    beast::get_lowest_layer(stream_).expires_after(ToChrono(server_->options().write_timeout));
    net::async_write(stream_, net::buffer(in_flight_), [self = Self()](beast::error_code ec, size_t) {
      self->writing_ = false;
      self->in_flight_.clear();
      if (ec) return self->Close();
      beast::get_lowest_layer(self->stream_).expires_never();
      if (!self->pending_.empty()) return self->Flush();
      if (self->ended_) self->Finished();
    });
  }

  // The response is out: the next request, or the end of the connection.
  void Finished() {
    handling_ = false;
    on_close_ = nullptr;
    close_timer_.cancel();
    if (!keep_alive_) return Close();
    ReadRequest();
  }

  std::shared_ptr<HttpServer::Impl> server_;
  Stream stream_;
  net::steady_timer close_timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  uint64_t serial_ = 0;      // the current exchange
  bool handling_ = false;    // a request was read and its response has not gone out yet
  bool keep_alive_ = true;
  bool responded_ = false;   // Send or StartStream was called
  bool streaming_ = false;
  bool ended_ = false;       // the response is complete (Send, or End of a stream)
  bool gone_ = false;        // the client disconnected during this exchange
  bool closed_ = false;
  bool writing_ = false;
  std::string pending_;      // bytes to write after the write in flight
  std::string in_flight_;
  std::function<void()> on_close_;
};

}  // namespace

absl::Status HttpServer::Impl::Listen() {
  if (options_.port < 0 || options_.port > 65535)
    return absl::InvalidArgumentError(absl::StrCat("HTTP port ", options_.port, " is outside [0, 65535]"));
  if (options_.tls_cert_file.empty() != options_.tls_key_file.empty())
    return absl::InvalidArgumentError("TLS needs both a certificate and a key file");
  if (!options_.tls_cert_file.empty()) {
    ssl_ctx_.emplace(ssl::context::tls_server);
    beast::error_code ec;
    ssl_ctx_->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                              ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1,
                          ec);
    ssl_ctx_->use_certificate_chain_file(options_.tls_cert_file, ec);
    if (ec)
      return absl::InvalidArgumentError(
          absl::StrCat("TLS certificate '", options_.tls_cert_file, "': ", ec.message()));
    ssl_ctx_->use_private_key_file(options_.tls_key_file, ssl::context::pem, ec);
    if (ec)
      return absl::InvalidArgumentError(absl::StrCat("TLS key '", options_.tls_key_file, "': ", ec.message()));
  }
  beast::error_code ec;
  tcp::resolver resolver(ioc_);
  auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty())
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve host '", options_.host, "': ", ec.message()));
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  const std::string where = absl::StrCat(options_.host, ":", options_.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", ec.message()));
  acceptor_.listen(net::socket_base::max_listen_connections, ec);
  if (ec) return absl::UnavailableError(absl::StrCat("cannot listen on ", where, ": ", ec.message()));
  port_ = acceptor_.local_endpoint().port();
  return absl::OkStatus();
}

void HttpServer::Impl::Accept() {
  acceptor_.async_accept(net::make_strand(ioc_), [self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || self->stopped()) return;
      // Out of descriptors, or a connection reset while queued: keep accepting.
      return self->Accept();
    }
    socket.set_option(tcp::no_delay(true), ec);
    if (self->ssl_ctx_) {
      std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(self, std::move(socket), *self->ssl_ctx_)
          ->Start();
    } else {
      std::make_shared<Session<beast::tcp_stream>>(self, std::move(socket))->Start();
    }
    self->Accept();
  });
}

void HttpServer::Impl::Run() {
  Accept();
  const int n = std::max(1, options_.io_threads);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { ioc_.run(); });
}

void HttpServer::Impl::Stop() {
  if (stopped_.exchange(true)) return;
  net::post(ioc_, [self = shared_from_this()] {
    beast::error_code ec;
    self->acceptor_.close(ec);
  });
  // Close every connection on its strand, then let the I/O threads finish what that completes.
  std::vector<std::shared_ptr<SessionBase>> open;
  {
    std::lock_guard<std::mutex> lock(sessions_mu_);
    for (const auto& weak : sessions_)
      if (auto s = weak.lock()) open.push_back(std::move(s));
  }
  for (auto& s : open) s->Post([s] { s->Close(); });
  open.clear();
  ioc_.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  // Handlers still queued (the closes above, if the threads stopped first) hold sessions, which
  // hold this: run them so that nothing keeps the io_context alive.
  ioc_.restart();
  ioc_.poll();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              HttpHandler handler) {
  auto impl = std::make_shared<Impl>(options, std::move(handler));
  if (absl::Status s = impl->Listen(); !s.ok()) return s;
  impl->Run();
  auto server = std::unique_ptr<HttpServer>(new HttpServer());
  server->shared_ = std::move(impl);
  return server;
}

HttpServer::~HttpServer() { Stop(); }

int HttpServer::port() const { return shared_->port(); }
bool HttpServer::tls() const { return shared_->tls(); }

std::string HttpServer::url() const {
  return absl::StrCat(tls() ? "https://" : "http://", shared_->options().host, ":", port());
}

void HttpServer::Stop() {
  if (shared_) shared_->Stop();
}

}  // namespace llm::server
