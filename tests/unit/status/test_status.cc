// The status page's HTTP server (runtime/http) and what it serves (apps/status_*): routes and
// token, the bounds on every client, the board's JSON and Prometheus text.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/run_report.h"
#include "apps/status_feed.h"
#include "apps/status_page.h"
#include "apps/status_report.h"
#include "dp/privacy_plan.h"
#include "runtime/http/server.h"
#include "runtime/net/inproc/inproc_transport.h"
#include "runtime/net/link_counters.h"
#include "runtime/net/tracing_transport.h"
#include "topology/generators.h"
#include "topology/schedule.h"

using namespace dpg;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// A raw client: a socket to 127.0.0.1:port, closed when it goes.
struct Client {
  int fd = -1;
  explicit Client(std::uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  }
  ~Client() {
    if (fd >= 0) ::close(fd);
  }
  Client(const Client&) = delete;
  Client(Client&& o) noexcept : fd(o.fd) { o.fd = -1; }
  void send(const std::string& bytes) const {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server closed: the caller reads what it said
      done += static_cast<size_t>(n);
    }
  }
  // Everything until the server closes or `within` passes.
  std::string read_all(milliseconds within = milliseconds(5000)) const {
    std::string out;
    const auto end = Clock::now() + within;
    char buf[65536];
    while (Clock::now() < end) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  // One whole response on a kept-alive connection: the header, then Content-Length bytes.
  std::string read_response() const {
    std::string out;
    char ch;
    const auto end = Clock::now() + milliseconds(5000);
    while (out.find("\r\n\r\n") == std::string::npos && Clock::now() < end) {
      if (::recv(fd, &ch, 1, 0) != 1) return out;
      out += ch;
    }
    std::smatch m;
    const std::regex length("Content-Length: ([0-9]+)", std::regex::icase);
    if (!std::regex_search(out, m, length)) return out;
    size_t want = std::stoul(m[1]);
    while (want > 0 && Clock::now() < end) {
      if (::recv(fd, &ch, 1, 0) != 1) break;
      out += ch;
      --want;
    }
    return out;
  }
};

std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + "Connection: close\r\n\r\n";
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0 || response.size() < 12) return -1;
  return std::stoi(response.substr(9, 3));
}

std::string body_of(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? std::string() : response.substr(at + 4);
}

// Waits until pred() holds, up to `within`; returns whether it did.
template <class Pred>
bool eventually(Pred pred, milliseconds within) {
  const auto end = Clock::now() + within;
  while (!pred()) {
    if (Clock::now() >= end) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

http::Server echo_server(http::ServerOptions o = {}) {
  return http::Server(o, [](const http::Request& r) {
    if (r.target == "/big") return http::Response{200, "text/plain", std::string(8 << 20, 'x')};
    if (r.target == "/throw") throw std::runtime_error("handler failed");
    return http::Response{200, "text/plain", r.method + " " + r.target + " [" + r.authorization + "]"};
  });
}

}  // namespace

TEST_CASE("http: GET and HEAD reach the handler; other methods get 405; errors 500") {
  http::Server s = echo_server();
  REQUIRE(s.port() != 0);
  {
    Client c(s.port());
    c.send(get("/a?b=1", "Authorization: Bearer xyz\r\n"));
    const std::string r = c.read_all();
    CHECK(status_of(r) == 200);
    CHECK(body_of(r) == "GET /a?b=1 [Bearer xyz]");
  }
  {
    Client c(s.port());
    c.send("HEAD /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    const std::string r = c.read_all();
    CHECK(status_of(r) == 200);
    CHECK(r.find("Content-Length: 10") != std::string::npos);  // "HEAD /x []"
    CHECK(body_of(r).empty());
  }
  {
    Client c(s.port());
    c.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
    CHECK(status_of(c.read_all()) == 405);
  }
  {
    Client c(s.port());
    c.send(get("/throw"));
    const std::string r = c.read_all();
    CHECK(status_of(r) == 500);
    CHECK(r.find("handler failed") == std::string::npos);
  }
  CHECK(s.requests_served() == 3);
}

TEST_CASE("http: a kept-alive connection serves one request after another") {
  http::Server s(http::ServerOptions{}, [](const http::Request& r) {
    return http::Response{200, "text/plain", r.target};
  });
  Client c(s.port());
  for (int i = 0; i < 5; ++i) {
    c.send("GET /" + std::to_string(i) + " HTTP/1.1\r\nHost: h\r\n\r\n");
    const std::string r = c.read_response();
    CHECK(status_of(r) == 200);
    CHECK(body_of(r) == "/" + std::to_string(i));
  }
  CHECK(s.open_connections() == 1);
}

TEST_CASE("http: a header or body past its bound is refused and the connection closed") {
  http::ServerOptions o;
  o.max_header_bytes = 2048;
  http::Server s(o, [](const http::Request&) { return http::Response{200, "text/plain", "ok"}; });
  {
    Client c(s.port());
    c.send("GET / HTTP/1.1\r\nHost: h\r\nX-Long: " + std::string(64 * 1024, 'a') + "\r\n\r\n");
    CHECK(status_of(c.read_all()) == 431);
  }
  {
    Client c(s.port());
    c.send("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 100000\r\n\r\n" + std::string(4096, 'b'));
    CHECK(status_of(c.read_all()) == 413);
  }
  {
    Client c(s.port());  // garbage: closed without an answer
    c.send("\x01\x02 not http\r\n\r\n");
    CHECK(c.read_all(milliseconds(2000)).empty());
  }
  CHECK(eventually([&] { return s.open_connections() == 0; }, milliseconds(3000)));
  CHECK(s.requests_served() == 0);
}

TEST_CASE("http: a thousand idle connections hold at most the bound, and time out") {
  http::ServerOptions o;
  o.max_connections = 16;
  o.io_timeout = milliseconds(500);
  http::Server s(o, [](const http::Request&) { return http::Response{200, "text/plain", "ok"}; });
  {
    std::vector<Client> idle;
    idle.reserve(1000);
    size_t most = 0;
    for (int i = 0; i < 1000; ++i) {
      idle.emplace_back(s.port());
      most = std::max(most, s.open_connections());
    }
    CHECK(most <= o.max_connections);
    // Once the idle ones have timed out, a new client is served.
    CHECK(eventually([&] { return s.open_connections() == 0; }, milliseconds(5000)));
    Client c(s.port());
    c.send(get("/"));
    CHECK(status_of(c.read_all()) == 200);
  }
}

TEST_CASE("http: a client that never reads its reply is closed after the timeout") {
  http::ServerOptions o;
  o.io_timeout = milliseconds(300);
  http::Server s = echo_server(o);
  Client slow(s.port());
  int small = 1024;  // a small receive buffer: the 8 MiB reply cannot be taken by the kernel
  ::setsockopt(slow.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  slow.send(get("/big"));
  CHECK(eventually([&] { return s.requests_served() == 1; }, milliseconds(3000)));
  CHECK(eventually([&] { return s.open_connections() == 0; }, milliseconds(5000)));
  // Meanwhile and after, the others are served.
  Client c(s.port());
  c.send(get("/x"));
  CHECK(status_of(c.read_all()) == 200);
}

TEST_CASE("http: out of descriptors, the server pauses and listens again, never spins") {
  http::Server s(http::ServerOptions{}, [](const http::Request&) {
    return http::Response{200, "text/plain", "ok"};
  });
  rlimit before{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &before) == 0);
  rlimit low = before;
  low.rlim_cur = 64;  // far above what the test binary holds; the clients below fill it
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &low) == 0);
  std::vector<int> held;
  for (int i = 0; i < 64; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;  // EMFILE: every descriptor is taken
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(s.port());
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);  // waits in the backlog
    held.push_back(fd);
  }
  // The connections wait in the backlog and every accept fails (EMFILE): the server's thread
  // must not spin on them (this process's CPU time over a second of it).
  const auto cpu_s = [] {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  const double cpu0 = cpu_s();
  std::this_thread::sleep_for(milliseconds(1000));
  const double busy = cpu_s() - cpu0;
  for (const int fd : held) ::close(fd);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &before) == 0);
  CHECK(held.size() > 10);
  CHECK(busy < 0.3);
  // With descriptors back, it serves again.
  Client c(s.port());
  c.send(get("/"));
  CHECK(status_of(c.read_all()) == 200);
}

TEST_CASE("http: a port in use is an error naming it") {
  http::Server first(http::ServerOptions{}, [](const http::Request&) { return http::Response{}; });
  http::ServerOptions o;
  o.port = first.port();
  const std::string where = "127.0.0.1:" + std::to_string(first.port());
  CHECK_THROWS_WITH(http::Server(o, [](const http::Request&) { return http::Response{}; }),
                    doctest::Contains(("cannot listen on " + where).c_str()));
  o.address = "not-an-address";
  CHECK_THROWS_WITH(http::Server(o, [](const http::Request&) { return http::Response{}; }),
                    doctest::Contains("is not an IP address"));
}

namespace {

struct Fixture {
  TrainConfig c;
  net::HostsFile hosts;
  std::vector<train::GossipPhase> phases;
  app::TransportPlan links{{1}, {2}};  // rank 0 reaches 1 over shared memory, 2 over TCP, 3 not
  dp::PrivacyPlan plan;
  Fixture() {
    c.algo = Algo::gossip;
    for (int r = 0; r < 4; ++r) hosts.peers.push_back({r, r < 2 ? "127.0.0.1" : "127.0.0.2", 0});
    topology::GraphSpec g;
    g.kind = "ring";
    g.peers = 4;
    phases.push_back(topology::Schedule::phase(0, "ring", topology::make(g)));
    dp::PlanInputs in;
    in.release = dp::Release::own;
    in.shard_rows = {1000, 1000, 1000, 1000};
    in.batch_size = 400;
    in.epochs = 5;
    in.target_epsilon = 3;
    in.delta = 1e-5;
    plan = dp::plan_privacy(in);
  }
  Json facts(const std::string& run = "r1") const {
    app::RunFacts f;
    f.run = run;
    f.config = &c;
    f.hosts = &hosts;
    f.world = 4;
    f.links = &links;
    f.phases = &phases;
    f.plan = &plan;
    return app::status_facts(f);
  }
};

http::Request request(const std::string& target, const std::string& auth = "") {
  return http::Request{"GET", target, auth};
}

}  // namespace

TEST_CASE("status: the facts: peers, how rank 0 reaches each, the graph, the plan's curve") {
  const Fixture fx;
  const Json f = fx.facts();
  CHECK(f["peers"] == 4);
  CHECK(f["algo"] == "gossip");
  REQUIRE(f["peer_list"].size() == 4);
  CHECK(f["peer_list"][0]["transport"] == "this process");
  CHECK(f["peer_list"][1]["transport"] == "shm");  // as make_transport chose
  CHECK(f["peer_list"][2]["transport"] == "tcp");
  CHECK(f["peer_list"][3]["transport"].is_null());  // no link from rank 0
  REQUIRE(f["graphs"].size() == 1);
  CHECK(f["graphs"][0]["edges"].size() == 4);  // the ring's undirected edges, once each
  CHECK(std::abs(f["graphs"][0]["rho"].get<double>() - 1.0 / 3.0) < 1e-9);
  const Json& curve = f["privacy"]["plan"];
  REQUIRE(curve.size() > 2);
  for (size_t i = 1; i < curve.size(); ++i) CHECK(curve[i][1] >= curve[i - 1][1]);
  CHECK(curve.back()[0] == fx.plan.steps);
  CHECK(curve.back()[1].get<double>() == doctest::Approx(fx.plan.model_after(fx.plan.steps).epsilon));
  CHECK(curve.back()[1].get<double>() <= 3.0 + 1e-6);
}

TEST_CASE("status: routes; /api/status and /metrics only with the token when one is set") {
  const Fixture fx;
  app::StatusBoard board;
  CHECK(board.status()["state"] == "starting");
  board.start(fx.facts(), [&](long long t) -> Json {
    return Json{{"data", fx.plan.peer_epsilons_after(t)},
                {"messages", fx.plan.peer_message_epsilons_after(t)}};
  });
  board.on_step(7);
  CHECK(app::answer_status(board, "", request("/")).body.find("<html") != std::string::npos);
  CHECK(app::answer_status(board, "", request("/nope")).status == 404);
  const http::Response open = app::answer_status(board, "", request("/api/status?x"));
  CHECK(open.status == 200);
  const Json s = Json::parse(open.body);
  CHECK(s["state"] == "running");
  CHECK(s["step"] == 7);
  CHECK(s["peer_epsilons"].size() == 4);
  CHECK(s["peer_epsilons"][0].get<double>() ==
        doctest::Approx(fx.plan.peer_epsilons_after(7)[0]));
  CHECK(s["peer_epsilons_step"] == 7);
  CHECK(s["peer_message_epsilons"][0].get<double>() ==
        doctest::Approx(fx.plan.peer_message_epsilons_after(7)[0]));

  const std::string token = "s3cret-token";
  CHECK(app::answer_status(board, token, request("/")).status == 200);  // the page holds no data
  for (const char* path : {"/api/status", "/metrics"}) {
    CAPTURE(path);
    CHECK(app::answer_status(board, token, request(path)).status == 401);
    CHECK(app::answer_status(board, token, request(path, "Bearer wrong-token!")).status == 401);
    CHECK(app::answer_status(board, token, request(path, "Bearer s3cret-toke")).status == 401);
    CHECK(app::answer_status(board, token, request(path, "bearer " + token)).status == 401);
    const http::Response ok = app::answer_status(board, token, request(path, "Bearer " + token));
    CHECK(ok.status == 200);
    CHECK(ok.body.find(token) == std::string::npos);
  }
  CHECK_THROWS_WITH(app::StatusPage(app::StatusListen{"0.0.0.0", 0, ""}),
                    doctest::Contains("needs the cluster secret"));
}

TEST_CASE("status: the Prometheus text is well formed, with escaped labels and +Inf") {
  const Fixture fx;
  app::StatusBoard board;
  board.start(fx.facts("run \"q\" \\ back\nslash"), nullptr);
  board.on_step(12);
  Json epoch{{"kind", "epoch"}, {"epoch", 1}, {"step", 10}, {"epsilon", INFINITY},
             {"message_epsilon", 1.5}, {"samples_per_second", 1000.0}, {"test_accuracy", 0.5},
             {"consensus_distance", 0.25}};
  board.add_epoch(epoch);
  const std::string text = board.prometheus();
  const std::regex sample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\["\\n])*",?)*\} ([-+]?[0-9.eE+-]+|\+Inf|-Inf|NaN)$)");
  std::istringstream lines(text);
  std::string line;
  int samples = 0;
  while (std::getline(lines, line)) {
    CAPTURE(line);
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    CHECK(std::regex_match(line, sample));
    ++samples;
  }
  CHECK(samples >= 10);
  CHECK(text.find("run=\"run \\\"q\\\" \\\\ back\\nslash\"") != std::string::npos);
  CHECK(text.find("dpgossip_steps{run=\"run \\\"q\\\" \\\\ back\\nslash\"} 12\n") != std::string::npos);
  CHECK(text.find("released=\"model\"} +Inf\n") != std::string::npos);
  CHECK(text.find("released=\"messages\"} 1.5\n") != std::string::npos);
  CHECK(text.find("dpgossip_consensus_distance{") != std::string::npos);
  // No peer epsilons while they cannot be said (null), and none invented.
  CHECK(text.find("dpgossip_peer_epsilon{") == std::string::npos);

  board.finish(Json{{"kind", "summary"}, {"epsilon", 2.5}, {"message_epsilon", 2.5},
                    {"peer_epsilons", {2.5, 2.0, 2.0, 2.0}}});
  const std::string end = board.prometheus();
  CHECK(end.find("released=\"model\"} 2.5\n") != std::string::npos);
  CHECK(end.find("peer=\"1\"} 2\n") != std::string::npos);
  CHECK(end.find("dpgossip_running{") != std::string::npos);
  CHECK(board.status()["state"] == "finished");
  board.fail("rank 2 died");
  CHECK(board.status()["state"] == "failed");
  CHECK(board.prometheus().find("dpgossip_failures{run=") != std::string::npos);
}

TEST_CASE("status: the board keeps a bounded number of consensus lines") {
  app::StatusBoard board;
  board.start(Fixture().facts(), nullptr);
  for (int i = 0; i < 5 * static_cast<int>(app::StatusBoard::kConsensusKept); ++i) {
    board.add_consensus(Json{{"round", i}, {"consensus_distance", 1.0}});
  }
  const Json s = board.status();
  CHECK(s["consensus"].size() <= app::StatusBoard::kConsensusKept);
  CHECK(s["consensus"].back()["round"] == 5 * app::StatusBoard::kConsensusKept - 1);
  CHECK(s["consensus_dropped"].get<size_t>() + s["consensus"].size() ==
        5 * app::StatusBoard::kConsensusKept);
}

TEST_CASE("status: the report holds the run's status inside the page, which no value can end") {
  app::StatusBoard board;
  board.start(Fixture().facts("a</script><script>alert(1)</script>"), nullptr);
  board.finish(Json{{"kind", "summary"}, {"steps", 50}, {"epsilon", 2.5}});
  const Json env = app::run_environment();
  CHECK(env["cores"].get<unsigned>() >= 1);
  CHECK(!env["dpgossip_commit"].get<std::string>().empty());
  const std::string html = app::status_report_html(board.status(), env);
  const auto count = [](const std::string& text, const std::string& part) {
    size_t n = 0;
    for (size_t at = 0; (at = text.find(part, at)) != std::string::npos; at += part.size()) ++n;
    return n;
  };
  // The page's own script, and the one that sets DPG_REPORT: the run name's tags are escaped.
  CHECK(count(html, "</script>") == count(app::status_html(), "</script>") + 1);
  const size_t begin = html.find("window.DPG_REPORT = ") + 20;
  const size_t end = html.find(";</script>", begin);
  const Json inside = Json::parse(html.substr(begin, end - begin));
  CHECK(inside["status"]["facts"]["run"] == "a</script><script>alert(1)</script>");
  CHECK(inside["status"]["step"] == 50);
  CHECK(inside["status"]["state"] == "finished");
  CHECK(inside["environment"] == env);
  CHECK(inside["status"]["facts"]["config"].contains("algo"));
  CHECK_FALSE(inside["status"]["facts"]["config"].contains("noise_seed"));
}

TEST_CASE("status: each peer's epsilon is recomputed at most every few seconds, however often asked") {
  const Fixture fx;
  app::StatusBoard board;
  int calls = 0;
  board.start(fx.facts(), [&](long long t) -> Json {
    ++calls;
    return Json{{"data", fx.plan.peer_epsilons_after(t)},
                {"messages", fx.plan.peer_message_epsilons_after(t)}};
  });
  for (long long t = 1; t <= 200; ++t) {
    board.on_step(t);
    const Json s = board.status();
    CHECK(s["step"] == t);
    CHECK(s["peer_epsilons_step"] == 1);  // the first figure, until kPeerEpsilonsEvery has passed
    (void)board.prometheus();
  }
  CHECK(calls == 1);
  board.finish(Json{{"kind", "summary"}, {"steps", 200}, {"peer_epsilons", {1.0, 1.0, 1.0, 1.0}}});
  // The summary's figures replace the model's at the end, for its step; the messages' are
  // computed once more for that step.
  const Json end = board.status();
  CHECK(end["peer_epsilons_step"] == 200);
  CHECK(end["peer_epsilons"][0] == 1.0);
  CHECK(end["peer_message_epsilons"][0].get<double>() ==
        doctest::Approx(fx.plan.peer_message_epsilons_after(200)[0]));
  (void)board.status();
  CHECK(calls == 2);
}

// The status feed (apps/status_feed.h) over the in-process fabric: each of three peers' counters
// reach rank 0's board, live and at the end.
TEST_CASE("status feed: every peer's figures reach rank 0's board, and its last ones at the end") {
  net::InprocFabric fabric(3);
  trace::Tracer off[3];
  app::StatusBoard board;
  std::vector<std::thread> threads;
  std::atomic<int> live_seen{0};
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      net::LinkCounters counters(3);
      net::TracingTransport t(fabric.peer(r), off[r], &counters);
      app::StatusFeed feed(fabric.peer(r), counters, r == 0 ? &board : nullptr, milliseconds(20));
      std::vector<std::byte> buf(1000);
      if (r == 1) t.wait(t.send(2, net::Tag{3, 0, 0}, buf));  // 1000 bytes from 1 to 2
      if (r == 2) t.wait(t.recv(1, net::Tag{3, 0, 0}, buf));
      for (long long step = 0; step < 5; ++step) feed.on_step(step);
      if (r == 0) {  // every peer heard from while the run goes on
        for (int i = 0; i < 500 && live_seen == 0; ++i) {
          const Json live = board.status()["live"];
          int heard = 0;
          for (const Json& p : live) heard += p.contains("step") && p["step"] == 4 ? 1 : 0;
          if (heard == 3) live_seen = 1;
          std::this_thread::sleep_for(milliseconds(5));
        }
      }
      std::this_thread::sleep_for(milliseconds(100));
      feed.finish();
    });
  }
  for (auto& th : threads) th.join();
  CHECK(live_seen == 1);
  const Json live = board.status()["live"];
  REQUIRE(live.size() == 3);
  for (const Json& p : live) {
    CHECK(p["state"] == "finished");
    CHECK(p["step"] == 5);  // the last hook was before step 4, which then ran
    CHECK(p["last_heard_s"].get<double>() < 5);
    CHECK(p["steps_per_second"].is_number());
  }
  REQUIRE(live[1]["links"].size() == 1);
  CHECK(live[1]["links"][0]["peer"] == 2);
  CHECK(live[1]["links"][0]["bytes_sent"] == 1000);
  CHECK(live[2]["links"][0]["bytes_received"] == 1000);
  CHECK(live[0]["links"].empty());  // the feed's own messages are not counted
  const std::string text = board.prometheus();
  CHECK(text.find("dpgossip_link_bytes_sent_total{run=\"\",from=\"1\",to=\"2\"} 1000\n") !=
        std::string::npos);
  CHECK(text.find("dpgossip_peer_bytes_received_total{run=\"\",peer=\"2\"} 1000\n") !=
        std::string::npos);
}

TEST_CASE("status feed: a run that fails gives up its feed at once, not after the timeout") {
  // Rank 0's feed waits on peers that never send (their feeds never start): destroyed without
  // finish(), as when the run fails, it must not wait out the fabric's 20 s timeout.
  net::InprocFabric fabric(3, std::chrono::seconds(20));
  trace::Tracer off;
  app::StatusBoard board;
  net::LinkCounters counters(3);
  const auto start = Clock::now();
  {
    app::StatusFeed feed(fabric.peer(0), counters, &board, milliseconds(20));
    std::this_thread::sleep_for(milliseconds(50));
  }
  CHECK(Clock::now() - start < std::chrono::seconds(5));
  const Json live = board.status()["live"];
  REQUIRE(live.size() == 3);
  CHECK(live[0].contains("step"));  // its own figures
  CHECK(live[1]["state"] == "not heard from");
}

namespace {

// A metrics file in a fresh folder, removed when it goes.
struct MetricsFile {
  std::filesystem::path dir;
  std::string path;
  explicit MetricsFile(const std::string& text) {
    static std::atomic<int> n{0};
    dir = std::filesystem::temp_directory_path() /
          ("dpg_status_test_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(dir);
    path = (dir / "metrics.jsonl").string();
    std::ofstream(path) << text;
  }
  ~MetricsFile() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::string line(const Json& j) { return j.dump() + "\n"; }

Json facts_line(const std::string& run, int peers) {
  return {{"kind", "facts"}, {"run", run}, {"algo", "gossip"}, {"peers", peers},
          {"peer_list", Json::array()}, {"graphs", Json::array()},
          {"privacy", {{"dp", true}, {"steps", 10}, {"plan", Json::array()}}}};
}

}  // namespace

TEST_CASE("report from a metrics file: the run's lines from its last facts line, and each refusal") {
  const Json epoch_a{{"kind", "epoch"}, {"run", "a"}, {"epoch", 1}, {"step", 5}};
  const Json summary_a{{"kind", "summary"}, {"run", "a"}, {"steps", 10}, {"epsilon", 1.5}};
  const Json epoch_b{{"kind", "epoch"}, {"run", "b"}, {"epoch", 1}, {"step", 3}};
  const Json live{{{"rank", 0}, {"state", "finished"}, {"bytes_sent", 100.0}}};
  // Run a twice under one name (the second attempt counts), then run b, which never ended.
  const MetricsFile f(line(facts_line("a", 1)) + line(epoch_a) + line(epoch_a) +
                      line(facts_line("a", 2)) + line(epoch_a) +
                      line(Json{{"kind", "peers"}, {"run", "a"}, {"live", live}}) +
                      line(summary_a) + "\n" + line(facts_line("b", 3)) + line(epoch_b));
  SUBCASE("the last run in the file by default; it has no summary, which the report says") {
    app::StatusBoard board;
    const app::RunLines r = app::load_run(f.path, "", board);
    CHECK(r.run == "b");
    CHECK_FALSE(r.ended);
    const Json s = board.status();
    CHECK(s["state"] == "failed");
    CHECK(s["failure"].get<std::string>().find("no summary") != std::string::npos);
    CHECK(s["facts"]["peers"] == 3);
    CHECK(s["epochs"].size() == 1);
  }
  SUBCASE("a named run: from its last facts line on") {
    app::StatusBoard board;
    const app::RunLines r = app::load_run(app::metrics_file_of(f.dir.string()), "a", board);
    CHECK(r.run == "a");
    CHECK(r.ended);
    CHECK(r.lines == 4);
    const Json s = board.status();
    CHECK(s["state"] == "finished");
    CHECK(s["step"] == 10);
    CHECK(s["facts"]["peers"] == 2);
    CHECK(s["epochs"].size() == 1);
    CHECK(s["live"] == live);
  }
  SUBCASE("refusals name the file, the line or the run") {
    app::StatusBoard board;
    auto refused = [&](const std::string& path, const std::string& run, const std::string& what) {
      try {
        app::load_run(path, run, board);
        FAIL("no error for " << what);
      } catch (const Error& e) {
        CHECK_MESSAGE(std::string(e.what()).find(what) != std::string::npos, e.what());
      }
    };
    refused(f.path, "c", "no line of a run named 'c'");
    const MetricsFile old(line(epoch_a) + line(summary_a));
    refused(old.path, "", "no run with a facts line");
    refused(old.path, "a", "run 'a' has no facts line");
    const MetricsFile bad(line(facts_line("a", 1)) + "{\"kind\": \"epoch\", oops\n");
    refused(bad.path, "", bad.path + ":2");
    refused(f.path + ".missing", "", f.path + ".missing");
  }
}
