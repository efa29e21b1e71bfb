// What `infer serve` answers while the model loads: every path (/health included) gets 503 with
// Retry-After, so that a load balancer or a readiness probe sees a replica that is not ready
// rather than a refused connection, and a client retries. /health's body is
// {"status": "loading"}; the API paths' is that API's error shape (OpenAI's, or Anthropic's on
// /v1/messages) with "status": "loading" beside it. It runs on the same parked transport as the
// real server (ParkingServer), so idle connections during a long load hold no thread.
#pragma once

#include <memory>
#include <string>

namespace infer::server {

class LoadingServer {
 public:
  // Binds host:port (0: any free port) and serves on its own threads until Stop(); idle
  // connections are closed after `idle_s`. Throws infer::Error if it cannot bind.
  LoadingServer(const std::string& host, int port, const std::string& replica_id,
                double idle_s = 5.0);
  ~LoadingServer();
  LoadingServer(const LoadingServer&) = delete;
  LoadingServer& operator=(const LoadingServer&) = delete;
  int port() const { return port_; }
  // Stops answering and frees the port (idempotent).
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = -1;
};

}  // namespace infer::server
