#include "server/loadtest/openai_target.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace llm::loadtest {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Json = nlohmann::json;

// Words for chat prompts of a given length in tokens (about one token each under BPE).
constexpr const char* kWords[] = {"the", "time", "of", "day", "and", "a", "small", "river", "ran",
                                  "past", "old", "town", "where", "people", "lived", "well"};

grpc::StatusCode FromHttpStatus(int status) {
  switch (status) {
    case 200:
      return grpc::StatusCode::OK;
    case 400:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 403:
      return grpc::StatusCode::PERMISSION_DENIED;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    case 504:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

v1::FinishReason FromOpenAiFinishReason(const std::string& reason) {
  if (reason == "length") return v1::FINISH_REASON_LENGTH;
  if (reason == "stop") return v1::FINISH_REASON_STOP;
  if (reason == "abort") return v1::FINISH_REASON_CANCELLED;
  return v1::FINISH_REASON_ERROR;
}

struct Shared {
  std::string host;
  std::string port;
  std::string model;
  bool chat = false;
  std::string api_key;
  tcp::resolver::results_type endpoints;
};

// The request body a GenerateRequest becomes.
std::string Body(const Shared& shared, const v1::GenerateRequest& r) {
  Json body = {{"model", shared.model},
               {"max_tokens", r.stopping().max_tokens()},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (r.sampling().has_temperature()) body["temperature"] = r.sampling().temperature();
  if (r.sampling().has_top_p()) body["top_p"] = r.sampling().top_p();
  if (r.sampling().has_seed()) body["seed"] = r.sampling().seed();
  if (r.stopping().ignore_eos()) body["ignore_eos"] = true;
  std::string text = r.text();
  if (shared.chat) {
    if (r.has_token_ids()) {
      text.clear();
      for (int32_t id : r.token_ids().ids()) absl::StrAppend(&text, text.empty() ? "" : " ", kWords[id % 16]);
    }
    body["messages"] = Json::array({{{"role", "user"}, {"content", text}}});
  } else if (r.has_token_ids()) {
    body["prompt"] = std::vector<int32_t>(r.token_ids().ids().begin(), r.token_ids().ids().end());
  } else {
    body["prompt"] = text;
  }
  return body.dump();
}

class SseCall final : public StreamCall, public std::enable_shared_from_this<SseCall> {
 public:
  SseCall(net::io_context& ioc, const Shared& shared, std::shared_ptr<const v1::GenerateRequest> request,
          RequestRecord record, SteadyClock::time_point origin, Owner* owner)
      : shared_(shared), stream_(net::make_strand(ioc)), record_(std::move(record)), origin_(origin), owner_(owner) {
    const std::string body = Body(shared, *request);
    request_ = absl::StrCat("POST ", shared.chat ? "/v1/chat/completions" : "/v1/completions", " HTTP/1.1\r\nHost: ",
                            shared.host, ":", shared.port,
                            "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n",
                            shared.api_key.empty() ? "" : absl::StrCat("Authorization: Bearer ", shared.api_key, "\r\n"),
                            "Content-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body);
  }

  void Start(std::chrono::system_clock::time_point deadline) override {
    record_.itl_ms.reserve(static_cast<size_t>(std::max<int64_t>(0, record_.expected_output - 1)));
    const auto left = deadline - std::chrono::system_clock::now();
    record_.send_ns = Now();
    net::post(stream_.get_executor(), [self = shared_from_this(), left] {
      self->stream_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(left));
      self->stream_.async_connect(self->shared_.endpoints, [self](beast::error_code ec, const tcp::endpoint&) {
        if (ec) return self->Finish(ec);
        net::async_write(self->stream_, net::buffer(self->request_),
                         [self](beast::error_code ec, size_t) { ec ? self->Finish(ec) : self->ReadHead(); });
      });
    });
  }

  void Cancel() override {
    net::post(stream_.get_executor(), [weak = weak_from_this()] {
      if (auto self = weak.lock()) {
        self->cancelled_ = true;
        beast::error_code ec;
        self->stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
        self->stream_.cancel();
      }
    });
  }

 private:
  int64_t Now() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - origin_).count();
  }

  void ReadHead() {
    parser_.body_limit(boost::none);
    http::async_read_header(stream_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->Finish(ec);
      self->status_ = static_cast<int>(self->parser_.get().result_int());
      self->ReadBody();
    });
  }

  void ReadBody() {
    if (parser_.is_done()) return Finish({});
    parser_.get().body().data = chunk_;
    parser_.get().body().size = sizeof chunk_;
    http::async_read_some(stream_, buffer_, parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec == http::error::need_buffer) ec = {};
      const size_t n = sizeof self->chunk_ - self->parser_.get().body().size;
      self->OnBytes(std::string_view(self->chunk_, n));
      if (ec) return self->Finish(ec == http::error::end_of_stream ? beast::error_code() : ec);
      self->ReadBody();
    });
  }

  // Server-sent events: "data: <json>" lines, an empty line ending each event.
  void OnBytes(std::string_view bytes) {
    if (status_ != 200) {
      error_body_.append(bytes);
      return;
    }
    pending_.append(bytes);
    size_t start = 0;
    for (size_t end; (end = pending_.find('\n', start)) != std::string::npos; start = end + 1) {
      std::string_view line(pending_.data() + start, end - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (absl::StartsWith(absl::string_view(line.data(), line.size()), "data:")) OnData(line.substr(5));
    }
    pending_.erase(0, start);
  }

  void OnData(std::string_view data) {
    while (!data.empty() && data.front() == ' ') data.remove_prefix(1);
    if (data == "[DONE]") return;
    const Json event = Json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (!event.is_object()) return;
    if (event.contains("error")) {
      failed_ = true;
      return;
    }
    const int64_t now = Now();
    if (event.contains("choices") && event["choices"].is_array()) {
      for (const Json& c : event["choices"]) {
        std::string text;
        bool carries_text = false;  // a text field, even empty (held back, or a model without a tokenizer)
        if (c.contains("text") && c["text"].is_string()) {
          text = c["text"].get<std::string>();
          carries_text = true;
        }
        if (c.contains("delta") && c["delta"].is_object() && c["delta"].contains("content") &&
            c["delta"]["content"].is_string()) {
          text = c["delta"]["content"].get<std::string>();
          carries_text = !c["delta"].contains("role");  // the role-only first chat chunk carries no token
        }
        const bool last = c.contains("finish_reason") && c["finish_reason"].is_string();
        // The server sends a chunk per engine update that has tokens: one with text, or with empty
        // text before the last one, is an arrival (tokens whose text is held back, or a model
        // without a tokenizer, whose text is always empty). The usage reconciles the count.
        if (!text.empty() || (carries_text && !last)) {
          if (record_.first_token_ns < 0) {
            record_.first_token_ns = now;
          } else {
            record_.itl_ms.push_back(static_cast<float>((now - record_.last_token_ns) / 1e6));
          }
          record_.last_token_ns = now;
          ++record_.output_tokens;
        }
        if (c.contains("finish_reason") && c["finish_reason"].is_string())
          record_.finish_reason = FromOpenAiFinishReason(c["finish_reason"].get<std::string>());
      }
    }
    if (event.contains("usage") && event["usage"].is_object()) {
      const Json& u = event["usage"];
      record_.usage.set_prompt_tokens(u.value("prompt_tokens", 0));
      record_.usage.set_completion_tokens(u.value("completion_tokens", 0));
      record_.got_final = record_.finish_reason != v1::FINISH_REASON_UNSPECIFIED;
    }
  }

  void Finish(beast::error_code ec) {
    record_.end_ns = Now();
    if (cancelled_) {
      record_.status = grpc::StatusCode::CANCELLED;
    } else if (ec == beast::error::timeout) {
      record_.status = grpc::StatusCode::DEADLINE_EXCEEDED;
    } else if (ec) {
      record_.status = grpc::StatusCode::UNAVAILABLE;
    } else if (status_ != 200) {
      record_.status = FromHttpStatus(status_);
    } else if (failed_ || !record_.got_final) {
      record_.status = grpc::StatusCode::INTERNAL;
    }
    // Tokens that shared a chunk (the server merges updates for a slow reader) arrive together:
    // gaps of 0, as the gRPC target records them.
    const int64_t tokens = record_.usage.completion_tokens();
    if (record_.status == grpc::StatusCode::OK && tokens > record_.output_tokens) {
      record_.itl_ms.insert(record_.itl_ms.end(), tokens - record_.output_tokens, 0.0f);
      record_.output_tokens = tokens;
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    Owner* owner = owner_;
    RequestRecord record = std::move(record_);
    owner->Forget(this);
    self_.reset();  // the handlers' references are the last ones
    owner->Record(std::move(record));
  }

 public:
  std::shared_ptr<SseCall> self_;  // until Start hands ownership to the handlers

 private:
  const Shared& shared_;
  beast::tcp_stream stream_;
  std::string request_;
  beast::flat_buffer buffer_;
  http::response_parser<http::buffer_body> parser_;
  char chunk_[8192];
  std::string pending_;
  std::string error_body_;
  int status_ = 0;
  bool failed_ = false;
  bool cancelled_ = false;
  RequestRecord record_;
  SteadyClock::time_point origin_;
  Owner* owner_;
};

class OpenAiTarget final : public Target {
 public:
  explicit OpenAiTarget(int threads) : work_(net::make_work_guard(ioc_)) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { ioc_.run(); });
  }
  ~OpenAiTarget() override {
    work_.reset();
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
  }

  absl::Status Connect(const OpenAiTargetOptions& options);
  int connections() const override { return static_cast<int>(threads_.size()); }
  absl::StatusOr<int64_t> CountTokens(const std::string&, bool) override {
    return absl::UnimplementedError("the OpenAI API has no tokenizer endpoint");
  }
  StreamCall* NewCall(std::shared_ptr<const v1::GenerateRequest> request, RequestRecord record,
                      SteadyClock::time_point origin, StreamCall::Owner* owner) override {
    auto call = std::make_shared<SseCall>(ioc_, shared_, std::move(request), std::move(record), origin, owner);
    call->self_ = call;
    return call.get();
  }

 private:
  absl::StatusOr<Json> GetModels();

  net::io_context ioc_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  Shared shared_;
};

absl::StatusOr<Json> OpenAiTarget::GetModels() {
  beast::tcp_stream stream(ioc_);
  stream.expires_after(std::chrono::seconds(10));
  beast::error_code ec;
  stream.connect(shared_.endpoints, ec);
  if (ec) return absl::UnavailableError(ec.message());
  http::request<http::empty_body> request(http::verb::get, "/v1/models", 11);
  request.set(http::field::host, shared_.host);
  if (!shared_.api_key.empty()) request.set(http::field::authorization, "Bearer " + shared_.api_key);
  http::write(stream, request, ec);
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  if (!ec) http::read(stream, buffer, response, ec);
  if (ec) return absl::UnavailableError(ec.message());
  if (response.result_int() != 200)
    return absl::Status(static_cast<absl::StatusCode>(FromHttpStatus(response.result_int())),
                        absl::StrCat("GET /v1/models: HTTP ", response.result_int(), ": ", response.body()));
  Json json = Json::parse(response.body(), nullptr, false);
  if (!json.is_object() || !json.contains("data") || !json["data"].is_array() || json["data"].empty() ||
      !json["data"][0].is_object())
    return absl::InvalidArgumentError("GET /v1/models: no model in the answer");
  return json["data"][0];
}

absl::Status OpenAiTarget::Connect(const OpenAiTargetOptions& options) {
  std::string rest = options.url;
  if (absl::StartsWith(rest, "https://"))
    return absl::InvalidArgumentError("--target: https is not supported by the load tester; use http://");
  if (absl::StartsWith(rest, "http://")) rest = rest.substr(7);
  rest = rest.substr(0, rest.find('/'));
  const size_t colon = rest.rfind(':');
  shared_.host = colon == std::string::npos ? rest : rest.substr(0, colon);
  shared_.port = colon == std::string::npos ? "80" : rest.substr(colon + 1);
  shared_.chat = options.chat;
  shared_.api_key = options.api_key;
  address_ = options.url;
  tcp::resolver resolver(ioc_);
  beast::error_code ec;
  shared_.endpoints = resolver.resolve(shared_.host, shared_.port, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("--target: cannot resolve '", shared_.host, "': ", ec.message()));
  const absl::Time give_up = absl::Now() + options.timeout;
  absl::StatusOr<Json> model;
  for (;;) {
    model = GetModels();
    if (model.ok() || model.status().code() != absl::StatusCode::kUnavailable || absl::Now() >= give_up) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  if (!model.ok())
    return absl::Status(model.status().code(), absl::StrCat(options.url, ": ", model.status().message()));
  shared_.model = model->value("id", "");
  model_info_.set_model(shared_.model);
  model_info_.set_architecture("openai");
  model_info_.set_device("?");
  model_info_.set_context_length(model->value("max_model_len", int64_t{4096}));
  model_info_.set_vocab_size(model->value("vocab_size", int64_t{1000}));
  model_info_.set_has_tokenizer(false);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Target>> ConnectOpenAi(const OpenAiTargetOptions& options) {
  if (options.io_threads < 1) return absl::InvalidArgumentError("--connections must be at least 1");
  auto target = std::make_unique<OpenAiTarget>(options.io_threads);
  if (absl::Status s = target->Connect(options); !s.ok()) return s;
  return std::unique_ptr<Target>(std::move(target));
}

}  // namespace llm::loadtest
