// The HTTP front of the engine: POST /v1/chat/completions (OpenAI's format), POST
// /v1/completions (the seed format's token / done / error events, sse.h, or OpenAI's format
// with completions_format "openai"), GET /health and GET /v1/models. Each response holds one HTTP
// worker thread while it waits on its requests' OutputChannel; a streaming client that goes away
// has its requests cancelled in the engine.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "infer/engine/engine.h"
#include "infer/engine/metrics.h"
#include "infer/engine/sampling_params.h"
#include "infer/server/lora_adapters.h"

namespace infer::server {

// What POST /v1/completions speaks: the seed format's event stream (sse.h), or OpenAI's format.
enum class CompletionsFormat { kSeed, kOpenAi };
// How chat replies' text is split: kQwen3 returns <think>...</think> as reasoning_content
// (vLLM's reasoning parser); kNone leaves it in the content.
enum class ReasoningParser { kNone, kQwen3 };

struct ServerOptions {
  // LoRA (--enable-lora): the adapters requests may name (null: none); with
  // allow_runtime_lora_updating, POST /v1/load_lora_adapter and /v1/unload_lora_adapter change
  // them (vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING).
  std::shared_ptr<LoraAdapters> lora_adapters;
  bool allow_runtime_lora_updating = false;
  // The build (/metrics' infer_build_info; none when its version is empty).
  BuildInfo build;
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (Bind() returns it)
  // HTTP worker threads, one per request being read or answered: the cap on requests served at
  // once (more are answered 503 at once instead of waiting). Idle connections hold none: they
  // wait parked (ParkingServer). 0: enough for every request the engine can hold (max_num_seqs
  // + queue, at most 1024) plus room for requests that are only turned away.
  int http_threads = 0;
  // A request whose headers take longer than this in all, a client that stalls in the middle of
  // its body for this long, or one that accepts no bytes of the response for this long, is
  // disconnected (its request cancelled).
  double read_timeout_s = 30.0;
  // A connection on which no request starts for this long (new or idle keep-alive) is closed.
  double keep_alive_timeout_s = 5.0;
  // On Shutdown(): how long running and queued requests may go on to finish while new ones get
  // 503 (/health says draining); what is left then ends with an error event. 0: at once.
  double shutdown_timeout_s = 0.0;
  // A streaming request with nothing to send for this long gets an SSE comment, which is how a
  // client that went away is noticed while its request is still queued.
  double heartbeat_s = 1.0;
  // Non-empty: every /v1/* route (and /metrics) requires "Authorization: Bearer <api_key>",
  // compared in constant time; others get 401 in OpenAI's error shape. /health stays open.
  std::string api_key;
  // Largest request body: a longer Content-Length is answered 413 from the headers alone.
  size_t max_body_bytes = 4 << 20;
  // The Responses API's store of responses (store: true, the default) for GET /v1/responses/{id}
  // and previous_response_id: at most this many, and this many bytes of their JSON; the oldest
  // are evicted first.
  size_t responses_store_entries = 1000;
  size_t responses_store_bytes = 64 << 20;
  CompletionsFormat completions_format = CompletionsFormat::kSeed;
  // The model's sampling defaults (generation_config.json) for OpenAI requests' unset fields.
  SamplingParams default_sampling;
  // Sent as X-Replica-Id on every response (and in the access log), so that a client or a load
  // balancer can tell which replica answered. Empty: no header.
  std::string replica_id;
  ReasoningParser reasoning_parser = ReasoningParser::kNone;
  // For /metrics' infer_compute_info (empty fields: no such gauge).
  ComputeInfo compute;
};

class HttpServer {
 public:
  // `engine` must outlive the server; the server starts and stops the engine's thread.
  HttpServer(Engine& engine, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port. Throws infer::Error if it cannot.
  int Bind();
  // Serves until Shutdown() (from any thread, e.g. a signal handler thread).
  void Run();
  // Drains: new requests get 503 and /health answers 503 "draining" while running and queued
  // requests go on for up to shutdown_timeout_s; then every request left fails with `reason`
  // (its stream ends with an error event), the streams get up to `flush_s` to flush, and the
  // server stops accepting and returns.
  void Shutdown(const std::string& reason = "server shutting down", double flush_s = 5.0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace infer::server
