#include "runtime/http/server.h"

#include <utility>  // before Asio: Boost 1.74 under g++ 12 (docs/ARCHITECTURE.md)

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <optional>
#include <thread>

#include "runtime/core/error.h"

namespace dpg::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

}  // namespace

struct Server::Impl {
  ServerOptions options;
  Handler handler;
  // Read from other threads; written on the server's thread only.
  std::atomic<std::size_t> open{0}, served{0};
  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  asio::steady_timer retry{io};  // the pause after a failed accept
  std::uint16_t port = 0;
  std::thread thread;

  void accept();
};

namespace {

// One connection: read a request (bounded), answer it, and again while the client keeps it
// alive; any error, timeout or bound reached closes it. Owned by its pending operation.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, Server::Impl& server)
      : stream_(std::move(socket)), buffer_(server.options.max_header_bytes + 1024),
        server_(server) {
    server_.open.fetch_add(1);
  }
  ~Session() { server_.open.fetch_sub(1); }

  void read() {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(server_.options.max_header_bytes));
    parser_->body_limit(server_.options.max_body_bytes);
    stream_.expires_after(server_.options.io_timeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](error_code ec, std::size_t) {
                        self->on_read(ec);
                      });
  }

 private:
  void on_read(error_code ec) {
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
      return answer_and_close(431, "request header too large\n");
    }
    if (ec == bhttp::error::body_limit) return answer_and_close(413, "request body too large\n");
    if (ec) return close();  // end of stream, timeout, a malformed request
    const auto& req = parser_->get();
    if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
      return answer_and_close(405, "only GET and HEAD\n");
    }
    Request request;
    request.method = std::string(req.method_string());
    request.target = std::string(req.target());
    if (auto it = req.find(bhttp::field::authorization); it != req.end()) {
      request.authorization = std::string(it->value());
    }
    Response answer;
    try {
      answer = server_.handler(request);
    } catch (...) {
      answer = Response{500, "text/plain; charset=utf-8", "internal error\n"};
    }
    server_.served.fetch_add(1);
    send(answer, req.keep_alive(), req.method() == bhttp::verb::head);
  }

  void answer_and_close(int status, const char* text) {
    send(Response{status, "text/plain; charset=utf-8", text}, false, false);
  }

  void send(const Response& answer, bool keep_alive, bool head) {
    reply_.emplace();
    reply_->result(static_cast<unsigned>(answer.status));
    reply_->version(11);
    reply_->set(bhttp::field::server, "dpgossip");
    reply_->set(bhttp::field::content_type, answer.content_type);
    reply_->set(bhttp::field::cache_control, "no-store");
    reply_->keep_alive(keep_alive);
    reply_->body() = head ? std::string() : answer.body;
    reply_->prepare_payload();
    if (head) reply_->content_length(answer.body.size());
    stream_.expires_after(server_.options.io_timeout);
    bhttp::async_write(stream_, *reply_,
                       [self = shared_from_this(), keep_alive](error_code ec, std::size_t) {
                         if (ec || !keep_alive) return self->close();
                         self->read();
                       });
  }

  void close() {
    error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;  // bounded: a header past max_header_bytes cannot grow it
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::optional<bhttp::response<bhttp::string_body>> reply_;
  Server::Impl& server_;
};

}  // namespace

void Server::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted) return;  // the server is stopping
    if (ec) {
      // Out of descriptors (EMFILE) or a reset before the accept: listen again after a pause,
      // so that an error that persists does not spin this thread.
      retry.expires_after(std::chrono::milliseconds(100));
      retry.async_wait([this](error_code wait) {
        if (!wait) accept();
      });
      return;
    }
    if (open.load() >= options.max_connections) {
      error_code ignored;
      socket.close(ignored);
    } else {
      std::make_shared<Session>(std::move(socket), *this)->read();
    }
    accept();
  });
}

Server::Server(const ServerOptions& options, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->handler = std::move(handler);
  const std::string where = options.address + ":" + std::to_string(options.port);
  error_code ec;
  const auto address = asio::ip::make_address(options.address, ec);
  if (ec) {
    fail(Code::invalid_argument, "status page: \"" + options.address + "\" is not an IP address");
  }
  const tcp::endpoint endpoint(address, options.port);
  tcp::acceptor& a = impl_->acceptor;
  a.open(endpoint.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(endpoint, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) impl_->port = a.local_endpoint(ec).port();
  if (ec) fail(Code::unavailable, "status page: cannot listen on " + where + ": " + ec.message());
  impl_->accept();
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

Server::~Server() {
  impl_->io.stop();
  impl_->thread.join();
  // Sessions still pending are destroyed with the io_context, before the counters they update.
}

std::uint16_t Server::port() const { return impl_->port; }
std::size_t Server::open_connections() const { return impl_->open.load(); }
std::size_t Server::requests_served() const { return impl_->served.load(); }

}  // namespace dpg::http
