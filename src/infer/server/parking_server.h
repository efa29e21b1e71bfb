// cpp-httplib's server with its per-connection loop replaced, so that a connection holds a
// worker thread only while one of its requests is read and answered:
//   - between requests (and before the first, if its bytes are not there yet) the connection is
//     parked in the ConnectionPool's epoll thread, not held by a worker waiting on it;
//   - a request's head (request line and headers) must arrive within the read timeout in all,
//     so a client that trickles a byte every few seconds is dropped instead of holding a worker
//     for as long as it likes (each read alone would wait only the read timeout).
// httplib's own loop (Server::process_and_close_socket) waits on each idle keep-alive
// connection in a worker for the keep-alive timeout; everything else (parsing, routing,
// handlers, streaming) is httplib's, through its protected process_request().
#pragma once

#include <httplib.h>

#include <cstddef>

namespace infer::server {

class ParkingServer : public httplib::Server {
 public:
  // Serves requests on `workers` threads (the cap on requests served at once) plus two that
  // answer the rest 503; idle connections wait `idle_s` for their next request, at most
  // `max_parked` of them.
  ParkingServer(size_t workers, double idle_s, size_t max_parked = 4096);

  // Called once a request's head has been read (the pre-routing handler): its body and the
  // response are bounded by the per-read timeouts only.
  static void HeadRead();

 private:
  // httplib's accept loop calls this (virtually) for each new connection, on a pool thread.
  bool process_and_close_socket(socket_t sock) override;
  // Serves the connection's requests while their bytes are there; parks it when it goes idle.
  void Serve(int fd, size_t requests_left);

  const double idle_s_;
};

}  // namespace infer::server
