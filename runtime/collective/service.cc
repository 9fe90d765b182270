#include "runtime/collective/service.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "runtime/core/check.h"
#include "runtime/core/log.h"
#include "runtime/net/link_counters.h"

namespace dpg::collective {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kMagic = 0x44505356;  // "DPSV"
constexpr uint32_t kDone = 0xffffffffu;  // the op of a client's last message

template <class T>
std::span<std::byte> bytes_of(T& v) {
  return std::as_writable_bytes(std::span(&v, 1));
}

}  // namespace

Service::Service(net::Transport& t, uint32_t tag_op, std::string name, std::vector<ServiceOp> ops,
                 trace::Tracer* tracer, bool background)
    : t_(t),
      tag_op_(tag_op),
      name_(std::move(name)),
      ops_(std::move(ops)),
      tracer_(tracer),
      background_(background),
      next_seq_(static_cast<std::size_t>(t.world()), 0),
      answered_(static_cast<std::size_t>(t.world()), 0) {}

Service::~Service() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& th : responders_) {
    if (th.joinable()) th.join();
  }
}

std::string Service::prefix() const { return rank_prefix(t_.rank()) + name_ + ": "; }

void Service::serve(const std::vector<int>& clients, uint64_t first, Handler handler) {
  if (!responders_.empty()) return;
  clients_ = clients;
  for (int c : clients) answered_[static_cast<std::size_t>(c)] = first;
  for (int c : clients) responders_.emplace_back([this, c, first, handler] { respond(c, first, handler); });
}

void Service::respond(int peer, uint64_t first, const Handler& handler) {
  const log::RankScope scope(t_.rank());
  const net::OffStepThread off_step;  // serves another peer: not this one's step
  std::optional<net::BackgroundWaits> background;
  if (background_) background.emplace();
  if (tracer_) tracer_->name_thread("responder");
  std::size_t req_max = 0, rep_max = 0;
  for (const auto& o : ops_) {
    req_max = std::max(req_max, o.request_bytes);
    rep_max = std::max(rep_max, o.reply_bytes);
  }
  std::vector<std::byte> request(req_max), reply(rep_max);
  Header h{};
  Status st{};
  uint64_t seq = first;
  try {
    for (;; ++seq) {
      t_.wait(t_.recv(peer, tag(seq, 0), bytes_of(h)));
      {
        std::lock_guard lock(mu_);
        if (stopping_) return;
      }
      if (h.op == kDone && h.magic == kMagic) return;
      if (h.magic != kMagic || h.op >= ops_.size()) {
        fail(peer, Code::data_loss, prefix() + "peer " + std::to_string(peer) +
                                        " sent an unknown request (op " + std::to_string(h.op) +
                                        ") as its request " + std::to_string(seq));
      }
      const ServiceOp& op = ops_[h.op];
      const auto in = std::span(request).first(op.request_bytes);
      const auto out = std::span(reply).first(op.reply_bytes);
      if (!in.empty()) t_.wait(t_.recv(peer, tag(seq, 1), in));
      try {
        Reply r(out);
        handler(Request{peer, h.op, seq, h.round}, arrived(std::span<const std::byte>(in)), r);
      } catch (const Blame& b) {
        // The client hears the culprit in place of its reply, before this side fails with it.
        if (!op.one_way) {
          st = Status{b.culprit(), static_cast<uint32_t>(b.code()), 0, 0, {}};
          const std::string text = b.what();
          st.length = static_cast<uint32_t>(std::min(text.size(), kTextBytes));
          std::memcpy(st.text, text.data(), st.length);
          try {
            t_.wait(t_.send(peer, tag(seq, 2), bytes_of(st)));
          } catch (const Error&) {
          }
        }
        record(b.culprit(), b.code(), b.what());
        return;
      }
      if (!op.one_way) {
        st = Status{-1, 0, 0, 0, {}};
        const auto hs = t_.send(peer, tag(seq, 2), bytes_of(st));
        if (!out.empty()) t_.wait(t_.send(peer, tag(seq, 3), out));
        t_.wait(hs);
      }
      {
        std::lock_guard lock(mu_);
        answered_[static_cast<std::size_t>(peer)] = seq + 1;
      }
      cv_.notify_all();
    }
  } catch (const Blame& b) {
    record(b.culprit(), b.code(), b.what());
  } catch (const Error& e) {
    // The link to this client failed (or its request was malformed): it is the culprit, unless
    // a failure came first.
    const std::string what = without_rank_prefix(e.what(), t_.rank());
    record(peer, e.code(), prefix() + "answering peer " + std::to_string(peer) + " (request " +
                               std::to_string(seq) + ") failed: " + what);
  }
}

void Service::Reply::put(std::size_t offset, Wire<const std::byte> bytes) {
  DPG_CHECK(offset <= out_.size() && bytes.size() <= out_.size() - offset);
  if (bytes.size() > 0) std::memcpy(out_.data() + offset, bytes.values().data(), bytes.size());
}

int Service::call(int peer, uint32_t op, uint64_t round, Wire<const std::byte> wire,
                  std::span<std::byte> reply) {
  const std::span<const std::byte> request = wire.values();
  rethrow();
  const bool done = op == kDone;
  const ServiceOp o = done ? ServiceOp{0, 0, true} : ops_.at(op);
  if (request.size() != o.request_bytes || reply.size() != o.reply_bytes) {
    fail(t_.rank(), Code::invalid_argument,
         prefix() + "op " + std::to_string(op) + " takes " + std::to_string(o.request_bytes) +
             " request and " + std::to_string(o.reply_bytes) + " reply bytes, not " +
             std::to_string(request.size()) + " and " + std::to_string(reply.size()));
  }
  std::size_t i = 0;
  while (i < calls_.size() && calls_[i].busy) ++i;
  if (i == calls_.size()) calls_.emplace_back();
  Call& c = calls_[i];
  c.busy = true;
  c.peer = peer;
  c.op = op;
  c.seq = next_seq_[static_cast<std::size_t>(peer)]++;
  c.header = Header{op, kMagic, round};
  c.handles.clear();
  if (!o.one_way) {
    c.handles.push_back(t_.recv(peer, tag(c.seq, 2), bytes_of(c.status)));
    if (!reply.empty()) c.handles.push_back(t_.recv(peer, tag(c.seq, 3), reply));
  }
  c.handles.push_back(t_.send(peer, tag(c.seq, 0), std::as_bytes(std::span(&c.header, 1))));
  if (!request.empty()) c.handles.push_back(t_.send(peer, tag(c.seq, 1), request));
  return static_cast<int>(i);
}

void Service::wait(int ticket) {
  Call& c = calls_.at(static_cast<std::size_t>(ticket));
  c.busy = false;
  const bool one_way = c.op == kDone || ops_.at(c.op).one_way;
  std::size_t k = 0;
  try {
    if (!one_way) {
      t_.wait(c.handles[k++]);  // the status first: a failure comes instead of the reply
      if (c.status.culprit >= 0) {
        const std::string text(c.status.text, std::min<std::size_t>(c.status.length, kTextBytes));
        const auto code = static_cast<Code>(c.status.code);
        record(c.status.culprit, code, text);
        t_.poison(code, text);  // its reply's receive stays posted: given up with the transport
        rethrow();
      }
    }
    for (; k < c.handles.size(); ++k) t_.wait(c.handles[k]);
  } catch (const Blame&) {
    throw;
  } catch (const Error& e) {
    if (!failed()) record(c.peer, e.code(), e.what());
    rethrow();
  }
}

void Service::finish(const std::vector<int>& servers) {
  std::vector<int> tickets;
  for (int s : servers) tickets.push_back(call(s, kDone, 0, public_value(std::span<const std::byte>()), {}));
  for (int t : tickets) wait(t);
}

void Service::join() {
  for (auto& th : responders_) {
    if (th.joinable()) th.join();
  }
  responders_.clear();
  rethrow();
}

void Service::drain(uint64_t n) {
  const auto patience = 2 * t_.timeout();
  std::unique_lock lock(mu_);
  auto last_progress = Clock::now();
  uint64_t last_total = 0;
  for (;;) {
    if (failed_) break;
    uint64_t total = 0;
    int behind = -1;
    for (int c : clients_) {
      total += answered_[static_cast<std::size_t>(c)];
      if (answered_[static_cast<std::size_t>(c)] < n && behind < 0) behind = c;
    }
    if (behind < 0) return;
    if (total != last_total) {
      last_total = total;
      last_progress = Clock::now();
    } else if (Clock::now() - last_progress > patience) {
      lock.unlock();
      fail(behind, Code::deadline_exceeded,
           prefix() + "waiting for peer " + std::to_string(behind) + "'s request " +
               std::to_string(n - 1) + " (it has " +
               std::to_string(answered(behind)) + " answered): no progress for " +
               seconds_text(patience));
    }
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  lock.unlock();
  rethrow();
}

void Service::record(int culprit, Code code, const std::string& message) {
  {
    std::lock_guard lock(mu_);
    if (failed_) return;
    failed_ = true;
    culprit_ = culprit;
    code_ = code;
    message_ = message;
  }
  cv_.notify_all();
}

void Service::fail(int culprit, Code code, const std::string& message) {
  record(culprit, code, message);
  rethrow();
  throw Blame(culprit, code, message);  // not reached
}

void Service::rethrow() {
  std::lock_guard lock(mu_);
  if (failed_) throw Blame(culprit_, code_, message_);
}

bool Service::failed() const {
  std::lock_guard lock(mu_);
  return failed_;
}

int Service::culprit() const {
  std::lock_guard lock(mu_);
  return culprit_;
}

uint64_t Service::answered(int peer) const {
  std::lock_guard lock(mu_);
  return answered_[static_cast<std::size_t>(peer)];
}

}  // namespace dpg::collective
