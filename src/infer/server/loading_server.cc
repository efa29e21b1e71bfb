#include "infer/server/loading_server.h"

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <thread>

#include "infer/core/error.h"
#include "infer/server/anthropic.h"
#include "infer/server/openai_response.h"
#include "infer/server/parking_server.h"

namespace infer::server {

namespace {
// Threads that answer at once; more connections in the same instant get the overflow lane's
// answer, which is the same 503.
constexpr size_t kLoadingWorkers = 4;

// The 503 body for a request path.
std::string LoadingBody(std::string_view path) {
  if (path == "/health") return R"({"status":"loading"})";
  constexpr std::string_view kMessage = "the model is loading; retry after Retry-After seconds";
  // The error shape of the API the path belongs to (a client shows its message), with the
  // status a balancer's probe reads.
  nlohmann::ordered_json body = path.starts_with("/v1/messages") ? AnthropicErrorJson(503, kMessage)
                                                                 : OpenAiErrorJson(503, kMessage);
  body["status"] = "loading";
  return body.dump();
}
}  // namespace

struct LoadingServer::Impl {
  explicit Impl(double idle_s) : server(kLoadingWorkers, idle_s) {}
  ParkingServer server;
  std::thread thread;
  std::atomic<bool> listen_returned{false};
};

LoadingServer::LoadingServer(const std::string& host, int port, const std::string& replica_id,
                             double idle_s)
    : impl_(std::make_unique<Impl>(idle_s)) {
  impl_->server.set_pre_routing_handler(
      [replica_id](const httplib::Request& req, httplib::Response& res) {
        ParkingServer::HeadRead();
        if (!replica_id.empty()) res.set_header("X-Replica-Id", replica_id);
        res.status = 503;
        res.set_header("Retry-After", "5");
        res.set_content(LoadingBody(req.path), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      });
  port_ = port == 0 ? impl_->server.bind_to_any_port(host)
                    : (impl_->server.bind_to_port(host, port) ? port : -1);
  INFER_CHECK(port_ > 0, "cannot listen on {}:{} (in use, or not an address of this machine)", host,
              port);
  impl_->thread = std::thread([impl = impl_.get()] {
    impl->server.listen_after_bind();
    impl->listen_returned = true;
  });
}

LoadingServer::~LoadingServer() { Stop(); }

void LoadingServer::Stop() {
  if (!impl_->thread.joinable()) return;
  // httplib's stop() does nothing before its accept loop runs: wait for it (a model that loads
  // at once would otherwise leave this thread accepting forever).
  while (!impl_->server.is_running() && !impl_->listen_returned) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  impl_->server.stop();
  impl_->thread.join();
}

}  // namespace infer::server
