#include "infer/server/http_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/server/chat_page.h"
#include "infer/server/completion_request.h"
#include "infer/server/connection_pool.h"
#include "infer/server/openai_api.h"
#include "infer/server/parking_server.h"
#include "infer/server/sse.h"

namespace infer::server {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kServiceUnavailable = 503;

// {"error": {"message", "type", "param", "code"}}, as OpenAI answers.
void SendError(httplib::Response& res, int status, const std::string& message,
               const std::string& param = {}) {
  res.status = status;
  res.set_content(OpenAiErrorJson(status, message, param)
                      .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

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

// Routes that need the API key: the OpenAI-style API and the metrics.
bool NeedsKey(const std::string& path) { return path.starts_with("/v1/") || path == "/metrics"; }

// One streaming response: the request's channel and what the HTTP side knows of it.
struct Stream {
  std::string request_id;
  std::shared_ptr<OutputChannel> channel;
  Clock::time_point last_write = Clock::now();
  bool finished = false;  // the final event was taken from the channel
};

// One OpenAI response: its choices' engine requests share one channel.
struct OpenAiStream {
  std::shared_ptr<OutputChannel> channel;
  std::unique_ptr<OpenAiResponse> response;
  Clock::time_point last_write = Clock::now();
  bool started = false;
  bool ended = false;  // [DONE] written
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

  void Routes();
  // Answers what is refused from the headers alone (over capacity, draining, too large, no key).
  httplib::Server::HandlerResponse PreRoute(const httplib::Request& req, httplib::Response& res);
  void Completions(const httplib::Request& req, httplib::Response& res);
  bool Pump(Stream& stream, httplib::DataSink& sink);
  void OpenAi(const httplib::Request& req, httplib::Response& res, OpenAiEndpoint endpoint);
  bool PumpOpenAi(OpenAiStream& stream, httplib::DataSink& sink);
  std::vector<int32_t> EncodeChat(const OpenAiRequest& request);
  void CancelChoices(const OpenAiResponse& response);

  Engine& engine;
  const ServerOptions options;
  const int http_threads;  // worker threads: the cap on requests served at once
  ParkingServer server;
  std::atomic<uint64_t> next_id{0};
  std::atomic<int> open_streams{0};
  std::atomic<bool> draining{false};  // Shutdown() began: new requests get 503
  std::atomic<bool> shutting_down{false};
  std::once_flag shutdown_once;
  std::mutex template_mutex;  // chat template rendering, one at a time
  int listen_fd = -1;         // the socket httplib binds, seen through its socket-options hook
};

httplib::Server::HandlerResponse HttpServer::Impl::PreRoute(const httplib::Request& req,
                                                            httplib::Response& res) {
  if (!options.replica_id.empty()) res.set_header("X-Replica-Id", options.replica_id);
  if (ConnectionPool::OverCapacity()) {
    res.set_header("Connection", "close");
    SendError(res, kServiceUnavailable,
              fmt::format("too many open connections: this server serves {} at once "
                          "(--http-threads)",
                          http_threads));
    return httplib::Server::HandlerResponse::Handled;
  }
  if (draining && req.method == "POST") {
    SendError(res, kServiceUnavailable, "server is draining (shutting down): try another replica");
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
                            length, options.max_body_bytes));
      return httplib::Server::HandlerResponse::Handled;
    }
  }
  if (options.api_key.empty() || !NeedsKey(req.path)) {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  if (ConstantTimeEquals(req.get_header_value("Authorization"), "Bearer " + options.api_key)) {
    return httplib::Server::HandlerResponse::Unhandled;
  }
  res.set_header("WWW-Authenticate", "Bearer");
  SendError(res, 401,
            req.has_header("Authorization")
                ? "invalid API key"
                : "missing API key: send the header \"Authorization: Bearer <key>\"");
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
      OpenAi(req, res, OpenAiEndpoint::kCompletions);
    } else {
      Completions(req, res);
    }
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    OpenAi(req, res, OpenAiEndpoint::kChatCompletions);
  });
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
    res.set_content(PrometheusText(engine.metrics(), engine.config().model),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", engine.config().model},
                        {"object", "model"},
                        {"owned_by", "infer"},
                        {"max_model_len", engine.max_model_len()}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(),
                    "application/json");
  });
  // One access-log line per request, once its response (a whole stream, too) is written.
  server.set_logger([](const httplib::Request& req, const httplib::Response& res) {
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
                  : fmt::format("{} {} failed with HTTP {}", req.method, req.path, res.status));
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(std::move(error));
        } catch (const std::exception& e) {
          message = e.what();
        } catch (...) {
        }
        spdlog::error("request handler failed: {}", message);
        SendError(res, 500, message);
      });
}

void HttpServer::Impl::Completions(const httplib::Request& req, httplib::Response& res) {
  CompletionRequest request;
  std::vector<int32_t> prompt_ids;
  try {
    request = ParseCompletionRequest(req.body, engine.config().model);
    try {
      prompt_ids = engine.PreparePrompt(request.prompt, request.params);
    } catch (const Error& e) {
      throw RequestError(422, e.what());
    }
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what());
  }
  const std::string request_id = fmt::format("cmpl-{}", next_id++);
  const auto num_prompt_tokens = prompt_ids.size();
  auto channel =
      engine.AddRequest(request_id, std::move(prompt_ids), request.params, request.priority);
  if (!channel) {
    return SendError(res, kServiceUnavailable,
                     shutting_down ? "server shutting down"
                                   : fmt::format("server overloaded: {} requests already waiting",
                                                 engine.config().max_waiting_requests));
  }
  spdlog::debug("{}: queued, {} prompt tokens, max_tokens {}", request_id, num_prompt_tokens,
                request.params.max_new_tokens);
  auto stream = std::make_shared<Stream>(Stream{request_id, std::move(channel)});
  ++open_streams;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Request-Id", request_id);
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, stream](size_t, httplib::DataSink& sink) { return Pump(*stream, sink); },
      [this, stream](bool) {
        // The response is over: if the client left before the end, free its slot.
        if (!stream->finished) {
          spdlog::info("{}: client disconnected, cancelling", stream->request_id);
          engine.Cancel(stream->request_id);
        }
        --open_streams;
      });
}

// Called by httplib in a loop while it returns true: waits a little for the next output and
// writes its events; a failed write (the client is gone) ends the response.
bool HttpServer::Impl::Pump(Stream& stream, httplib::DataSink& sink) {
  const auto output = stream.channel->Pop(std::chrono::milliseconds(100));
  const auto now = Clock::now();
  if (!output) {
    if (now - stream.last_write < std::chrono::duration<double>(options.heartbeat_s)) return true;
    stream.last_write = now;
    static constexpr std::string_view kPing = ": ping\n\n";
    return sink.write(kPing.data(), kPing.size());
  }
  const std::string events = StepOutputEvents(*output);
  stream.finished = output->finished;
  if (!events.empty() && !sink.write(events.data(), events.size())) return false;
  stream.last_write = now;
  if (stream.finished) sink.done();
  return true;
}

std::vector<int32_t> HttpServer::Impl::EncodeChat(const OpenAiRequest& request) {
  if (options.chat_template == nullptr || engine.tokenizer() == nullptr) {
    throw RequestError(400,
                       "this model has no chat template (tokenizer_config.json chat_template or "
                       "chat_template.jinja): use /v1/completions");
  }
  nlohmann::ordered_json variables = request.chat_template_kwargs;
  variables["add_generation_prompt"] = request.add_generation_prompt;
  std::string prompt;
  try {
    std::lock_guard lock(template_mutex);
    prompt = options.chat_template->Render(request.messages, variables);
  } catch (const Error& e) {
    throw RequestError(400, fmt::format("the chat template failed: {}", e.what()), "messages");
  }
  // The template writes BOS itself.
  return engine.tokenizer()->Encode(prompt, /*add_special_tokens=*/false);
}

void HttpServer::Impl::CancelChoices(const OpenAiResponse& response) {
  for (int64_t i = 0; i < response.num_choices(); ++i) {
    engine.Cancel(OpenAiResponse::ChoiceRequestId(response.id(), i));
  }
}

void HttpServer::Impl::OpenAi(const httplib::Request& req, httplib::Response& res,
                              OpenAiEndpoint endpoint) {
  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  OpenAiRequest request;
  std::vector<OpenAiResponse::PromptInfo> prompts;
  std::vector<SamplingParams> params;
  try {
    const std::string& model = engine.config().model;
    request = chat ? ParseChatCompletionRequest(req.body, model, options.default_sampling)
                   : ParseOpenAiCompletionRequest(req.body, model, options.default_sampling);
    if (!request.ignored_fields.empty()) {
      spdlog::debug("{} {}: ignoring unknown fields {}", req.method, req.path,
                    fmt::join(request.ignored_fields, ", "));
    }
    if (chat) {
      prompts.push_back({EncodeChat(request), {}});
    } else {
      const Tokenizer* tokenizer = engine.tokenizer();
      for (const auto& prompt : request.prompts) {
        OpenAiResponse::PromptInfo info;
        if (const auto* text = std::get_if<std::string>(&prompt)) {
          if (tokenizer == nullptr) {
            throw RequestError(400, "text prompts need a tokenizer (the model folder has none)",
                               "prompt");
          }
          info.ids = tokenizer->Encode(*text, /*add_special_tokens=*/true);
          info.text = *text;
        } else {
          info.ids = std::get<std::vector<int32_t>>(prompt);
          if (tokenizer != nullptr) info.text = tokenizer->Decode(info.ids, false);
        }
        prompts.push_back(std::move(info));
      }
    }
    for (const auto& prompt : prompts) {
      SamplingParams p = request.params;
      const int64_t room = engine.max_model_len() - std::ssize(prompt.ids);
      if (!request.max_tokens && room < 1) {
        throw RequestError(400,
                           fmt::format("the prompt ({} tokens) leaves no room to generate within "
                                       "max_model_len ({})",
                                       prompt.ids.size(), engine.max_model_len()),
                           chat ? "messages" : "prompt");
      }
      p.max_new_tokens = request.max_tokens.value_or(room);
      try {
        engine.PreparePrompt(prompt.ids, p);
      } catch (const Error& e) {
        throw RequestError(400, e.what());
      }
      params.push_back(std::move(p));
    }
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what(), e.param());
  }
  const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id++);
  auto stream = std::make_shared<OpenAiStream>();
  stream->channel = std::make_shared<OutputChannel>();
  stream->response = std::make_unique<OpenAiResponse>(
      request, id, engine.config().model, static_cast<int64_t>(std::time(nullptr)), prompts,
      engine.tokenizer(), options.reasoning_parser == ReasoningParser::kQwen3);
  const OpenAiResponse& response = *stream->response;
  for (int64_t choice = 0; choice < response.num_choices(); ++choice) {
    const auto prompt = static_cast<size_t>(choice / request.n);
    SamplingParams p = params[prompt];
    // Each choice its own stream of random numbers; with a seed, choice i uses seed + i (vLLM).
    if (p.seed && choice > 0) p.seed = *p.seed + static_cast<uint64_t>(choice);
    if (!engine.AddRequest(OpenAiResponse::ChoiceRequestId(id, choice), prompts[prompt].ids, p,
                           request.priority, stream->channel)) {
      CancelChoices(response);
      return SendError(res, kServiceUnavailable,
                       shutting_down ? "server shutting down"
                                     : fmt::format("server overloaded: {} requests already waiting",
                                                   engine.config().max_waiting_requests));
    }
  }
  spdlog::debug("{}: queued {} choice(s), {} prompt tokens", id, response.num_choices(),
                prompts.front().ids.size());
  res.set_header("X-Request-Id", id);
  if (!request.stream) {
    // Wait for every choice (a client that leaves is noticed only when the answer is written).
    while (!stream->response->finished()) {
      if (auto output = stream->channel->Pop(std::chrono::milliseconds(100))) {
        stream->response->Add(*output);
      }
    }
    if (const auto& error = stream->response->error()) {
      return SendError(res, shutting_down ? kServiceUnavailable : 500, *error);
    }
    res.set_content(stream->response->Final().dump(
                        -1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                    "application/json");
    return;
  }
  ++open_streams;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, stream](size_t, httplib::DataSink& sink) { return PumpOpenAi(*stream, sink); },
      [this, stream](bool) {
        if (!stream->response->finished()) {
          spdlog::info("{}: client disconnected, cancelling", stream->response->id());
          CancelChoices(*stream->response);
        }
        --open_streams;
      });
}

bool HttpServer::Impl::PumpOpenAi(OpenAiStream& stream, httplib::DataSink& sink) {
  const auto write = [&](const std::string& text) {
    stream.last_write = Clock::now();
    return text.empty() || sink.write(text.data(), text.size());
  };
  if (!stream.started) {
    stream.started = true;
    if (!write(stream.response->StreamStart())) return false;
  }
  const auto output = stream.channel->Pop(std::chrono::milliseconds(100));
  if (!output) {
    if (Clock::now() - stream.last_write < std::chrono::duration<double>(options.heartbeat_s)) {
      return true;
    }
    return write(": ping\n\n");
  }
  if (!write(stream.response->Add(*output))) return false;
  if (stream.response->finished() && !stream.ended) {
    stream.ended = true;
    if (!write(stream.response->StreamEnd())) return false;
    sink.done();
  }
  return true;
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
