#include "infer/server/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/server/chat_page.h"
#include "infer/server/connection_pool.h"
#include "infer/server/handlers.h"
#include "infer/server/parking_server.h"

namespace infer::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kServiceUnavailable = 503;

// a == b in time that depends only on the lengths (the key is not leaked through timing of
// its first wrong byte).
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i]) ^
            static_cast<unsigned char>(i < b.size() ? b[i] : static_cast<char>(~a[i]));
  }
  return diff == 0;
}

// Routes that need the API key: the OpenAI- and Anthropic-style APIs, vLLM's tokenizer routes
// and the metrics.
bool NeedsKey(const std::string& path) {
  return path.starts_with("/v1/") || path == "/metrics" || path == "/tokenize" ||
         path == "/detokenize";
}

// The routes counted in http_requests_total (as vLLM's instrumentator counts its handlers:
// not the probes and scrapes, not unknown paths).
constexpr std::array<std::string_view, 9> kCountedRoutes = {"/v1/completions",
                                                            "/v1/chat/completions",
                                                            "/v1/messages",
                                                            "/v1/responses",
                                                            "/v1/messages/count_tokens",
                                                            "/tokenize",
                                                            "/detokenize",
                                                            "/v1/models",
                                                            "/"};
// A stored response's route, counted under its template (as vLLM's instrumentator names routes
// with path parameters), not each id.
constexpr std::string_view kResponseRoute = "/v1/responses/{response_id}";

// Requests answered, by route, method and status class (2xx, 4xx, 5xx).
class RouteCounter {
 public:
  void Count(const httplib::Request& req, const httplib::Response& res) {
    std::string handler = req.path;
    if (handler.starts_with("/v1/responses/") && handler.find('/', 14) == std::string::npos) {
      handler = kResponseRoute;
    } else if (std::find(kCountedRoutes.begin(), kCountedRoutes.end(), handler) ==
               kCountedRoutes.end()) {
      return;
    }
    const std::lock_guard lock(mutex_);
    ++counts_[{handler, req.method, fmt::format("{}xx", res.status / 100)}];
  }
  // The Prometheus text of http_requests_total.
  std::string Text() const {
    std::string text =
        "# HELP http_requests_total Total number of requests by method, status and handler.\n"
        "# TYPE http_requests_total counter\n";
    const std::lock_guard lock(mutex_);
    for (const auto& [key, count] : counts_) {
      const auto& [handler, method, status] = key;
      text += fmt::format("http_requests_total{{handler=\"{}\",method=\"{}\",status=\"{}\"}} {}\n",
                          handler, method, status, count);
    }
    return text;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::tuple<std::string, std::string, std::string>, int64_t> counts_;
};

// Worker threads: --http-threads, or enough for every request the engine can hold (running and
// queued) plus room for requests that are only turned away.
int HttpThreads(const EngineConfig& config, const ServerOptions& options) {
  if (options.http_threads > 0) return options.http_threads;
  return static_cast<int>(
      std::min<int64_t>(config.max_num_seqs + config.max_waiting_requests + 16, 1024));
}

// Raises the soft open-file limit to the hard one (at most 2^20), as servers do: every parked
// idle connection holds a descriptor.
void RaiseOpenFileLimit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 1 << 20);
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

// Idle connections kept open: as many as the open-file limit leaves room for beside the workers,
// at most 16384.
size_t MaxIdleConnections(int http_threads) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 512;
  const int64_t room = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, 1 << 20)) -
                       2 * static_cast<int64_t>(http_threads) - 256;
  return static_cast<size_t>(std::clamp<int64_t>(room, 64, 16384));
}

}  // namespace

struct HttpServer::Impl {
  Impl(Engine& engine, ServerOptions options)
      : engine(engine),
        options(std::move(options)),
        http_threads(HttpThreads(engine.config(), this->options)),
        server(static_cast<size_t>(http_threads), this->options.keep_alive_timeout_s,
               (RaiseOpenFileLimit(), MaxIdleConnections(http_threads))) {}

  // The generation routes (handlers.h) behind the limits of PreRoute.
  void Routes();
  // /health, the chat page, /metrics, /v1/models.
  void InfoRoutes();
  // The access log, and JSON answers for unknown routes and thrown exceptions.
  void Hooks();
  // Answers what is refused from the headers alone (over capacity, draining, too large, no key).
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res);

  Engine& engine;
  const ServerOptions options;
  const int http_threads;  // worker threads: the cap on requests served at once
  ParkingServer server;
  std::atomic<int> open_streams{0};
  std::atomic<bool> draining{false};  // Shutdown() began: new requests get 503
  std::atomic<bool> shutting_down{false};
  ApiHandlers handlers{engine, options, open_streams, shutting_down};
  RouteCounter route_counter;
  std::once_flag shutdown_once;
  int listen_fd = -1;  // the socket httplib binds, seen through its socket-options hook
};

httplib::Server::HandlerResponse HttpServer::Impl::PreRoute(const httplib::Request& req,
                                                            httplib::Response& res) {
  if (!options.replica_id.empty()) res.set_header("X-Replica-Id", options.replica_id);
  const ErrorShape shape = ErrorShapeOf(req.path);
  if (ConnectionPool::OverCapacity()) {
    res.set_header("Connection", "close");
    SendError(res, kServiceUnavailable,
              fmt::format("too many open connections: this server serves {} at once "
                          "(--http-threads)",
                          http_threads),
              {}, shape);
    return httplib::Server::HandlerResponse::Handled;
  }
  if (draining && req.method == "POST") {
    SendError(res, kServiceUnavailable, "server is draining (shutting down): try another replica",
              {}, shape);
    return httplib::Server::HandlerResponse::Handled;
  }
  if (req.has_header("Content-Length")) {
    const std::string length = req.get_header_value("Content-Length");
    unsigned long long bytes = 0;
    const bool parsed = !length.empty() && length.size() <= 19 &&
                        length.find_first_not_of("0123456789") == std::string::npos;
    if (parsed) bytes = std::stoull(length);
    if (!parsed || bytes > options.max_body_bytes) {
      SendError(res, 413,
                fmt::format("request body of {} bytes is larger than this server's limit of {} "
                            "bytes (--max-body-size)",
                            length, options.max_body_bytes),
                {}, shape);
      return httplib::Server::HandlerResponse::Handled;
    }
  }
  if (options.api_key.empty() || !NeedsKey(req.path)) {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  // The key as OpenAI's clients send it, or as Anthropic's do (x-api-key).
  if (ConstantTimeEquals(req.get_header_value("Authorization"), "Bearer " + options.api_key) ||
      (req.has_header("x-api-key") &&
       ConstantTimeEquals(req.get_header_value("x-api-key"), options.api_key))) {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  res.set_header("WWW-Authenticate", "Bearer");
  SendError(res, 401,
            req.has_header("Authorization") || req.has_header("x-api-key")
                ? "invalid API key"
                : "missing API key: send the header \"Authorization: Bearer <key>\" (or "
                  "\"x-api-key: <key>\")",
            {}, shape);
  return httplib::Server::HandlerResponse::Handled;
}

void HttpServer::Impl::Routes() {
  // Runs once the headers are read and before the body is: an oversized body is refused from
  // its Content-Length without reading it (the connection is then closed, its bytes unread).
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    ParkingServer::HeadRead();
    const auto handled = PreRoute(req, res);
    // A request answered here leaves its body unread: the connection cannot carry another.
    if (handled == httplib::Server::HandlerResponse::Handled && !res.has_header("Connection") &&
        (req.has_header("Content-Length") || req.has_header("Transfer-Encoding"))) {
      res.set_header("Connection", "close");
    }
    return handled;
  });
  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (options.completions_format == CompletionsFormat::kOpenAi) {
      handlers.OpenAi(req, res, ChatEndpoint::kCompletions);
    } else {
      handlers.SeedCompletions(req, res);
    }
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handlers.OpenAi(req, res, ChatEndpoint::kChatCompletions);
  });
  server.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    handlers.Anthropic(req, res, /*count_tokens=*/false);
  });
  server.Post("/v1/messages/count_tokens",
              [this](const httplib::Request& req, httplib::Response& res) {
                handlers.Anthropic(req, res, /*count_tokens=*/true);
              });
  server.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    handlers.Responses(req, res);
  });
  const auto by_id = [this](const httplib::Request& req, httplib::Response& res) {
    handlers.ResponseById(req, res, req.matches[1].str());
  };
  server.Get(R"(/v1/responses/([^/]+))", by_id);
  server.Delete(R"(/v1/responses/([^/]+))", by_id);
  server.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    handlers.Tokenize(req, res);
  });
  server.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    handlers.Detokenize(req, res);
  });
  InfoRoutes();
  Hooks();
}

void HttpServer::Impl::InfoRoutes() {
  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining) {
      res.status = kServiceUnavailable;
      res.set_content(R"({"status":"draining"})", "application/json");
      return;
    }
    res.set_content(fmt::format(R"({{"status":"ok","kv_cache":{}}})", engine.KvCacheSummaryJson()),
                    "application/json");
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = ChatPageHtml();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(
        PrometheusText(engine.metrics(), engine.config().model, options.compute, options.build) +
            route_counter.Text(),
        "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/v1/models",
             [this](const httplib::Request&, httplib::Response& res) { handlers.ListModels(res); });
  if (options.lora_adapters && options.allow_runtime_lora_updating) {
    server.Post("/v1/load_lora_adapter",
                [this](const httplib::Request& req, httplib::Response& res) {
                  handlers.LoadLoraAdapter(req, res);
                });
    server.Post("/v1/unload_lora_adapter",
                [this](const httplib::Request& req, httplib::Response& res) {
                  handlers.UnloadLoraAdapter(req, res);
                });
  }
}

void HttpServer::Impl::Hooks() {
  // One access-log line per request, once its response (a whole stream, too) is written.
  server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    route_counter.Count(req, res);
    if (req.path == "/health" || req.path == "/metrics") return;  // probes and scrapes
    spdlog::info("{} {} {} {}", req.method, req.path, res.status,
                 res.get_header_value("X-Request-Id"));
  });
  // Unknown paths and methods, thrown exceptions: JSON errors like every other answer.
  server.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    SendError(res, res.status,
              res.status == 404
                  ? fmt::format("{} {} is not a route of this server", req.method, req.path)
                  : fmt::format("{} {} failed with HTTP {}", req.method, req.path, res.status),
              {}, ErrorShapeOf(req.path));
  });
  server.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(std::move(error));
        } catch (const std::exception& e) {
          message = e.what();
        } catch (...) {
        }
        spdlog::error("request handler failed: {}", message);
        SendError(res, 500, message, {}, ErrorShapeOf(req.path));
      });
}

HttpServer::HttpServer(Engine& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(options))) {
  const auto seconds = [](double s) {
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(s));
  };
  impl_->server.set_read_timeout(seconds(impl_->options.read_timeout_s));
  impl_->server.set_write_timeout(seconds(impl_->options.read_timeout_s));
  impl_->server.set_payload_max_length(impl_->options.max_body_bytes);  // chunked bodies
  impl_->server.set_socket_options([impl = impl_.get()](socket_t sock) {
    httplib::default_socket_options(sock);
    // A new connection is accepted only once its first bytes arrive (Linux TCP_DEFER_ACCEPT),
    // so silent ones first wait in the kernel. It gives up after its SYN-ACK retries (about 63 s)
    // and hands the still-silent ones over; they then wait parked (no thread) until
    // --timeout-keep-alive closes them.
    const int defer_s = 60;
    if (::setsockopt(sock, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s)) != 0) {
      spdlog::warn("could not set TCP_DEFER_ACCEPT: {}", std::strerror(errno));
    }
    impl->listen_fd = sock;
  });
  impl_->Routes();
}

HttpServer::~HttpServer() { Shutdown(); }

int HttpServer::Bind() {
  const ServerOptions& options = impl_->options;
  int port = options.port;
  if (port == 0) {
    port = impl_->server.bind_to_any_port(options.host);
  } else if (!impl_->server.bind_to_port(options.host, port)) {
    port = -1;
  }
  INFER_CHECK(port > 0, "cannot listen on {}:{} (in use, or not an address of this machine)",
              options.host, options.port);
  // Debian's compiled cpp-httplib listens with a backlog of 5: a burst of new connections
  // overflows it and the kernel drops SYNs, which clients retry only ~1 s later. Calling
  // listen() again on the bound socket raises the backlog (Linux keeps the socket).
  if (impl_->listen_fd >= 0 && ::listen(impl_->listen_fd, SOMAXCONN) != 0) {
    spdlog::warn("could not raise the listen backlog: {}", std::strerror(errno));
  }
  return port;
}

void HttpServer::Run() {
  impl_->engine.Start();
  impl_->server.listen_after_bind();
}

void HttpServer::Shutdown(const std::string& reason, double flush_s) {
  std::call_once(impl_->shutdown_once, [&] {
    Impl& impl = *impl_;
    impl.draining = true;
    const auto drain_deadline =
        Clock::now() + std::chrono::duration<double>(impl.options.shutdown_timeout_s);
    if (impl.options.shutdown_timeout_s > 0 && impl.engine.HasWork()) {
      spdlog::info("draining: new requests get 503; running ones have up to {} s to finish",
                   impl.options.shutdown_timeout_s);
    }
    while (impl.engine.HasWork() && Clock::now() < drain_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    impl.shutting_down = true;
    impl.engine.Stop(reason);
    const auto flush_deadline = Clock::now() + std::chrono::duration<double>(flush_s);
    while (impl.open_streams > 0 && Clock::now() < flush_deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    impl.server.stop();
  });
}

}  // namespace infer::server
