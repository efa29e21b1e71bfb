// `infer serve`: the completions API over HTTP (seed phase 4). SIGINT/SIGTERM shut it down
// gracefully: queued and running requests end with an error event, then the process exits 0;
// a second signal exits at once.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include <spdlog/spdlog.h>

#include "infer/cli/generation_session.h"
#include "infer/core/error.h"
#include "infer/engine/engine.h"
#include "infer/server/http_server.h"

namespace infer::cli {
namespace {

struct ServeArgs {
  ModelArgs model;
  EngineConfig engine;
  server::ServerOptions server;
  std::string served_model_name;
};

// Signals are taken by one thread with sigwait (no async-signal-safety traps). It must be set up
// before any other thread starts so that every thread blocks them.
class SignalWaiter {
 public:
  SignalWaiter() {
    sigemptyset(&signals_);
    for (int signal : {SIGINT, SIGTERM, SIGUSR1}) sigaddset(&signals_, signal);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
    std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server
    thread_ = std::thread([this] { Wait(); });
  }
  ~SignalWaiter() {
    pthread_kill(thread_.native_handle(), SIGUSR1);
    thread_.join();
    if (shutdown_.joinable()) shutdown_.join();
  }
  // From now on the first SIGINT/SIGTERM shuts `server` down (before: the process exits).
  void Serve(server::HttpServer* server) { server_.store(server); }

 private:
  void Wait() {
    for (int count = 0;;) {
      int signal = 0;
      if (sigwait(&signals_, &signal) != 0 || signal == SIGUSR1) return;
      server::HttpServer* server = server_.load();
      if (server == nullptr || ++count > 1) {
        std::fprintf(stderr, "infer serve: %s, exiting now\n", strsignal(signal));
        std::_Exit(128 + signal);
      }
      std::fprintf(stderr, "infer serve: %s, shutting down (again to exit now)\n",
                   strsignal(signal));
      shutdown_ = std::thread([server] { server->Shutdown("server shutting down"); });
    }
  }

  sigset_t signals_{};
  std::atomic<server::HttpServer*> server_{nullptr};
  std::thread thread_;
  std::thread shutdown_;
};

void RunServe(ServeArgs& args) {
  SignalWaiter signals;
  args.engine.model = args.served_model_name.empty() ? args.model.model : args.served_model_name;
  args.engine.Validate();
  GenerationSession session(args.model);
  Engine engine(args.engine, session.model(), session.tokenizer(), session.eos_token_ids());
  server::HttpServer http(engine, args.server);
  const int port = http.Bind();
  std::fprintf(stderr,
               "infer serve: listening on http://%s:%d (model \"%s\", max batch %lld, "
               "max waiting %lld)\n",
               args.server.host.c_str(), port, args.engine.model.c_str(),
               static_cast<long long>(args.engine.max_batch_size),
               static_cast<long long>(args.engine.max_waiting_requests));
  std::fflush(stderr);
  signals.Serve(&http);
  http.Run();
  std::fprintf(stderr, "infer serve: stopped\n");
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* command = app.add_subcommand(
      "serve", "Serve POST /v1/completions (server-sent events), GET /health, GET /v1/models");
  AddModelOptions(*command, args->model);
  command->add_option("--host", args->server.host, "Address to listen on")->capture_default_str();
  command->add_option("--port", args->server.port, "Port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  command->add_option("--served-model-name", args->served_model_name,
                      "The model name clients must send (default: the --model value)");
  command->add_option("--max-batch-size", args->engine.max_batch_size, "Requests per batch")
      ->capture_default_str();
  command
      ->add_option("--max-num-batched-tokens", args->engine.max_num_batched_tokens,
                   "Most prompt tokens per prefill call (longer prefills run in chunks)")
      ->capture_default_str();
  command
      ->add_option("--max-waiting-requests", args->engine.max_waiting_requests,
                   "Queued requests beyond this get HTTP 503")
      ->capture_default_str();
  command
      ->add_option("--max-seq-len", args->engine.max_seq_len,
                   "Longest prompt + max_tokens of a request (also capped by the model)")
      ->capture_default_str();
  command
      ->add_option("--batch-wait-timeout", args->engine.batch_wait_timeout_s,
                   "Seconds a forming batch waits to fill")
      ->capture_default_str();
  command->add_option("--seed", args->engine.seed, "Default seed of requests that give none");
  command
      ->add_option("--http-threads", args->server.http_threads,
                   "HTTP worker threads (0: max batch + max waiting + 16)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  command->callback([args] { RunServe(*args); });
}

}  // namespace infer::cli
