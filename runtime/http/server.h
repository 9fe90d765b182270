// A small HTTP/1.1 server for the live status page (docs/STATUS.md): it answers GET and HEAD
// from a handler, on one thread of its own, and bounds everything a client can push at it: a
// request's header and body, the connections held open, the time to send a request or to read
// a reply. A client past a bound is closed, never waited on; the run it watches never waits on
// the server. With runtime/net/tcp, the only room that includes Asio (here with Beast).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace dpg::http {

struct Request {
  std::string method;         // "GET" or "HEAD" (others are answered 405 before the handler)
  std::string target;         // the path and query, as sent: "/api/status?x=1"
  std::string authorization;  // the Authorization header, empty when absent
};

struct Response {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
};

// Called on the server's thread for every request; it must not block for long (it is the
// server's only thread). An exception becomes a 500 with no detail.
using Handler = std::function<Response(const Request&)>;

struct ServerOptions {
  std::string address = "127.0.0.1";
  std::uint16_t port = 0;  // 0: a free port, read back with Server::port()
  // Connections past this are accepted and closed at once, so idle clients cannot hold more.
  std::size_t max_connections = 64;
  std::size_t max_header_bytes = 8 * 1024;  // past it: 431, then the connection is closed
  std::size_t max_body_bytes = 1024;        // a GET has none; past it: 413
  // To send a whole request (or to wait for the next one on a kept-alive connection), and to
  // take a whole reply: a silent or slow client is closed after it.
  std::chrono::milliseconds io_timeout{5000};
};

class Server {
 public:
  // Binds and listens (an error naming the address and port when it cannot), then serves on a
  // thread of its own until destroyed.
  Server(const ServerOptions& options, Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  std::uint16_t port() const;
  std::size_t open_connections() const;  // accepted and not yet closed
  std::size_t requests_served() const;   // answered by the handler (any status)

  struct Impl;  // server.cc's (named here so that its sessions can reach it)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpg::http
