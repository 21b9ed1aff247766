// http_library_probe: the two HTTP server libraries Debian packages, serving what `llm serve`'s
// HTTP port serves, for measure_connections.py to load the same way:
//   GET /metrics  a Prometheus page (40 KB, as the real one with every histogram)
//   GET /sse      a server-sent event every --interval-ms for --events events (a token stream)
// --library beast is the server `llm serve` uses (server/http/http_server.h), unchanged;
// --library httplib is cpp-httplib (libcpp-httplib-dev), configured as its documentation says
// for many connections (a thread pool of --threads; one thread per connection while it is open).
//
//   http_library_probe --library beast --port 18090
#include <httplib.h>

#include <sys/resource.h>

#include <atomic>
#include <mutex>
#include <vector>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/cli/flags.h"
#include "server/http/http_server.h"

namespace {

std::string MetricsPage() {
  std::string page;
  for (int i = 0; page.size() < 40000; ++i)
    absl::StrAppend(&page, "llm_probe_bucket{model_name=\"probe\",le=\"", i, "\"} ", i * 7, "\n");
  return page;
}

std::atomic<bool> stop{false};

// One feeder thread writes the next event to every open stream each interval, as the engine's
// output thread hands each step's tokens to every request: nothing blocks an I/O thread.
int RunBeast(int port, int threads, int events, int interval_ms, const std::string& page) {
  struct Stream {
    std::shared_ptr<llm::server::HttpResponder> responder;
    int sent = 0;
  };
  std::mutex mu;
  std::vector<Stream> streams;
  llm::server::HttpServerOptions options;
  options.port = port;
  options.io_threads = threads;
  auto server = llm::server::HttpServer::Start(
      options, [&](llm::server::HttpRequest request, std::shared_ptr<llm::server::HttpResponder> responder) {
        if (request.path == "/metrics") return responder->Send(200, "text/plain", page);
        if (request.path == "/health") return responder->Send(200, "application/json", "{}");
        responder->StartStream(200, "text/event-stream");
        std::lock_guard<std::mutex> lock(mu);
        streams.push_back({std::move(responder)});
      });
  if (!server.ok()) {
    std::fprintf(stderr, "%s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  std::printf("listening on %d\n", (*server)->port());
  std::fflush(stdout);
  while (!stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
    std::lock_guard<std::mutex> lock(mu);
    for (Stream& s : streams) {
      if (s.sent < events) {
        s.responder->Write(absl::StrCat("data: {\"i\":", s.sent, "}\n\n"));
      } else {
        s.responder->Write("data: [DONE]\n\n");
        s.responder->End();
      }
      ++s.sent;
    }
    std::erase_if(streams, [events](const Stream& s) { return s.sent > events; });
  }
  return 0;
}

int RunHttplib(int port, int threads, int events, int interval_ms, const std::string& page) {
  httplib::Server server;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) { res.set_content(page, "text/plain"); });
  server.Get("/health", [](const httplib::Request&, httplib::Response& res) { res.set_content("{}", "application/json"); });
  server.Get("/sse", [events, interval_ms](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [events, interval_ms](size_t, httplib::DataSink& sink) {
      for (int i = 0; i < events; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
        const std::string event = absl::StrCat("data: {\"i\":", i, "}\n\n");
        if (!sink.write(event.data(), event.size())) return false;
      }
      sink.write("data: [DONE]\n\n", 14);
      sink.done();
      return true;
    });
  });
  if (!server.bind_to_port("127.0.0.1", port)) return 1;
  std::printf("listening on %d\n", port);
  std::fflush(stdout);
  std::thread stopper([&] {
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    server.stop();
  });
  server.listen_after_bind();
  stopper.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  llm::cli::FlagSet flags("", "Serves /metrics and /sse with one of two HTTP libraries.", "http_library_probe");
  std::string library = "beast";
  int64_t port = 18090, threads = 2, events = 100, interval_ms = 20;
  flags.String("library", &library, "beast or httplib");
  flags.Int("port", &port, "port on 127.0.0.1");
  flags.Int("threads", &threads, "I/O threads (beast) or pool threads (httplib)");
  flags.Int("events", &events, "events per /sse stream");
  flags.Int("interval-ms", &interval_ms, "milliseconds between events");
  if (auto exit_code = llm::cli::HandleParse(flags, argc, argv)) return *exit_code;
  std::signal(SIGTERM, [](int) { stop = true; });
  std::signal(SIGINT, [](int) { stop = true; });
  // Thousands of connections need as many descriptors as the hard limit allows.
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  const std::string page = MetricsPage();
  if (library == "beast") return RunBeast(port, threads, events, interval_ms, page);
  if (library == "httplib") return RunHttplib(port, threads, events, interval_ms, page);
  std::fprintf(stderr, "--library is beast or httplib\n");
  return 2;
}
