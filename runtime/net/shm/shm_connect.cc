// Set-up: every peer listens on a Unix socket in the abstract namespace (named after its hosts
// file address and the user, so nothing is left in the file system and a crash leaves nothing
// behind); of each pair the higher rank connects, creates the pair's memfd (mode 0600, size
// sealed) and passes it with its eventfd (SCM_RIGHTS). Both sides check the other's user
// (SO_PEERCRED), rank, world, config hash, boot id and ring sizes, and try one direct read of
// the other's memory (process_vm_readv) to learn whether large messages may go direct. The
// socket then stays open: its end of file tells that the peer is gone.
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "runtime/core/hash.h"
#include "runtime/core/log.h"
#include "runtime/core/os_random.h"
#include "runtime/net/shm/shm_impl.h"
#include "runtime/net/shm/shm_socket.h"

namespace dpg::net {
namespace {

using Clock = std::chrono::steady_clock;
using namespace shm_socket;

inline constexpr uint32_t kHelloMagic = 0x53475044;  // "DPGS"
inline constexpr uint32_t kHelloVersion = 1;

// One side's hello, native byte order (both ends share a machine).
struct ShmHello {
  uint32_t magic = kHelloMagic;
  uint32_t version = kHelloVersion;
  uint32_t rank = 0;
  uint32_t world = 0;
  uint64_t config_hash = 0;
  char boot_id[40] = {};
  uint32_t slot_bytes = 0;
  uint32_t slots = 0;
  uint64_t probe_address = 0;  // a word of the sender's memory holding probe_value
  uint64_t probe_value = 0;
  uint32_t can_read = 0;  // reply only: the accepting side read the connector's probe
  uint32_t pad = 0;
};

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << std::hex << v;
  return os.str();
}

// "@dpgossip-shm-<uid>-<hash of host:port>": unique per hosts-file address and user.
std::string socket_name(const PeerAddress& a) {
  return "dpgossip-shm-" + std::to_string(::getuid()) + "-" +
         hex(fnv1a64(a.host + ":" + std::to_string(a.port)));
}

}  // namespace

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  if (id.empty() || id.size() >= sizeof(ShmHello::boot_id)) {
    fail(Code::failed_precondition,
         "cannot read /proc/sys/kernel/random/boot_id (needed to confirm that peers share "
         "this machine)");
  }
  return id;
}

namespace {

struct Setup {
  ShmTransport::Impl& t;
  const HostsFile& hosts;
  Clock::time_point deadline;
  std::string my_boot;
  uint64_t probe = 0;  // the word peers read to learn whether direct reads work
  std::map<int, std::string> last_error;

  ShmHello hello() const {
    ShmHello h;
    h.rank = static_cast<uint32_t>(t.rank);
    h.world = static_cast<uint32_t>(t.world);
    h.config_hash = t.options.config_hash;
    std::memcpy(h.boot_id, my_boot.data(), my_boot.size());
    h.slot_bytes = t.options.slot_bytes;
    h.slots = t.options.slots;
    h.probe_address = reinterpret_cast<uint64_t>(&probe);
    h.probe_value = probe;
    return h;
  }

  [[noreturn]] void refuse(Code code, const std::string& message) {
    fail(code, t.prefix() + message);
  }

  // Checks a peer's hello; `peer` is the rank expected, or -1 (accepting: any of `expected`).
  void check(const ShmHello& h, int peer, const std::set<int>& expected) {
    const std::string who = "peer " + std::to_string(h.rank);
    if (h.magic != kHelloMagic || h.version != kHelloVersion) {
      refuse(Code::data_loss, "a shared-memory connection sent no dpgossip hello of version " +
                                  std::to_string(kHelloVersion));
    }
    if (static_cast<int>(h.world) != t.world) {
      refuse(Code::failed_precondition,
             who + " runs with " + std::to_string(h.world) + " peers, this one with " +
                 std::to_string(t.world) + "; every peer must read the same hosts file");
    }
    if (h.config_hash != t.options.config_hash) {
      refuse(Code::failed_precondition,
             who + " was started with a different training configuration (config hash " +
                 hex(h.config_hash) + ", this peer's " + hex(t.options.config_hash) +
                 "); start every peer with the same settings");
    }
    const bool known = peer >= 0 ? static_cast<int>(h.rank) == peer
                                 : expected.count(static_cast<int>(h.rank)) > 0;
    if (!known) {
      refuse(Code::failed_precondition,
             "a shared-memory connection claims to be " + who +
                 ", which this peer does not expect (duplicate rank in the launch?)");
    }
    const std::string boot(h.boot_id, strnlen(h.boot_id, sizeof h.boot_id));
    if (boot != my_boot) {
      refuse(Code::failed_precondition,
             who + " runs under another kernel (boot id " + boot + ", this peer's " + my_boot +
                 ") though the hosts file puts it on this peer's host; use --transport tcp");
    }
    if (h.slot_bytes != t.options.slot_bytes || h.slots != t.options.slots) {
      refuse(Code::failed_precondition,
             who + " uses rings of " + std::to_string(h.slots) + " slots of " +
                 std::to_string(h.slot_bytes) + " bytes, this peer " +
                 std::to_string(t.options.slots) + " of " + std::to_string(t.options.slot_bytes) +
                 "; start every peer with the same settings");
    }
  }

  // Another user's process at the other end is refused: the socket's name is public.
  bool same_user(int fd, ucred& cred, const std::string& what) {
    if (!peer_cred(fd, cred)) {
      last_error[-1] = what + ": SO_PEERCRED failed: " + errno_text(errno);
      return false;
    }
    if (cred.uid != ::getuid()) {
      DPG_WARN(what << ": the process at the other end (pid " << cred.pid
                          << ") runs as user " << cred.uid << ", not " << ::getuid()
                          << "; refused");
      return false;
    }
    return true;
  }

  ShmPair& adopt(int peer, Fd sock, pid_t pid, Fd doorbell, Mapping map, int side, bool direct) {
    auto p = std::make_unique<ShmPair>();
    p->early = EarlyQueue(t.options.early);
    p->peer = peer;
    p->pid = pid;
    p->sock = std::move(sock);
    p->doorbell = std::move(doorbell);
    p->view = shm::view_pair(map.base, side, t.options.slot_bytes, t.options.slots);
    p->map = std::move(map);
    p->direct = direct;
    t.pairs[peer] = std::move(p);
    return *t.pairs[peer];
  }

  Mapping map_fd(int fd, std::size_t bytes) {
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      refuse(Code::unavailable, "cannot map " + std::to_string(bytes) +
                                    " bytes of shared memory: " + errno_text(errno));
    }
    Mapping m;
    m.base = base;
    m.bytes = bytes;
    return m;
  }

  // A fresh pair mapping: a memfd readable by this user only, its size sealed so that the
  // peer can neither shrink it under a reader (SIGBUS) nor grow it.
  Fd make_memfd(std::size_t bytes) {
    Fd fd(::memfd_create("dpgossip-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (fd.fd < 0 || ::fchmod(fd.fd, 0600) != 0 ||
        ::ftruncate(fd.fd, static_cast<off_t>(bytes)) != 0 ||
        ::fcntl(fd.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      refuse(Code::unavailable, "cannot make " + std::to_string(bytes) +
                                    " bytes of shared memory (memfd): " + errno_text(errno));
    }
    return fd;
  }

  void connect_to(int peer) {
    const std::string name = socket_name(hosts.peers[peer]);
    sockaddr_un addr;
    const socklen_t len = abstract_address(name, addr);
    auto backoff = std::chrono::milliseconds(1);
    const std::string what = "peer " + std::to_string(peer) + " (@" + name + ")";
    for (;;) {
      if (Clock::now() >= deadline) return;  // reported with the other outstanding peers
      check_stop(t.options.stop, t.prefix());
      Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (fd.fd < 0) refuse(Code::unavailable, "socket(AF_UNIX): " + errno_text(errno));
      int rc = ::connect(fd.fd, reinterpret_cast<sockaddr*>(&addr), len);
      if (rc != 0 && errno == EINPROGRESS && wait_for(fd.fd, POLLOUT, deadline)) {
        int err = 0;
        socklen_t l = sizeof err;
        ::getsockopt(fd.fd, SOL_SOCKET, SO_ERROR, &err, &l);
        rc = err == 0 ? 0 : -1;
        errno = err;
      }
      if (rc != 0) {  // not listening yet, or its backlog is full: back off and retry
        last_error[peer] = errno_text(errno);
        std::this_thread::sleep_for(backoff);
        backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
        continue;
      }
      ucred cred{};
      if (!same_user(fd.fd, cred, what)) {
        last_error[peer] = "the socket belongs to another user";
        std::this_thread::sleep_for(backoff);
        continue;
      }
      const std::size_t bytes = shm::mapping_bytes(t.options.slot_bytes, t.options.slots);
      Fd mem = make_memfd(bytes);
      Mapping map = map_fd(mem.fd, bytes);
      shm::init_pair(map.base, t.options.slot_bytes, t.options.slots);
      const ShmHello mine = hello();
      std::string why = send_all(fd.fd, &mine, sizeof mine, {mem.fd, t.doorbell.fd}, deadline);
      ShmHello theirs;
      std::vector<Fd> fds;
      if (why.empty()) why = recv_all(fd.fd, &theirs, sizeof theirs, fds, 1, deadline);
      if (!why.empty()) {
        last_error[peer] = why;
        continue;
      }
      check(theirs, peer, {});
      if (fds.size() != 1 || !is_eventfd(fds[0].fd)) {
        refuse(Code::data_loss, what + " answered without its eventfd");
      }
      const uint32_t can_read = probe_read(cred.pid, theirs.probe_address, theirs.probe_value);
      why = send_all(fd.fd, &can_read, sizeof can_read, {}, deadline);
      if (!why.empty()) refuse(Code::unavailable, what + ": " + why);
      adopt(peer, std::move(fd), cred.pid, std::move(fds[0]), std::move(map), 0,
            theirs.can_read != 0);
      return;
    }
  }

  // Handles one accepted connection; returns the peer it joined, or -1 when it was ignored.
  int accept_one(Fd fd, const std::set<int>& expected) {
    ucred cred{};
    if (!same_user(fd.fd, cred, "a shared-memory connection")) return -1;
    // One connection's own deadline: a local process that connects and says nothing is dropped
    // then, and the set-up goes on with the next (as TCP's handshake_timeout).
    const auto until =
        std::min(deadline, Clock::now() + handshake_bound(t.options.connect_timeout));
    ShmHello theirs;
    std::vector<Fd> fds;
    std::string why = recv_all(fd.fd, &theirs, sizeof theirs, fds, 2, until);
    if (!why.empty()) {
      DPG_WARN("ignored a shared-memory connection (pid " << cred.pid
                          << ") that sent no valid hello (" << why << ")");
      return -1;
    }
    ShmHello mine = hello();
    const int peer = static_cast<int>(theirs.rank);
    // Answer a mismatch first, so that the other side learns it from its own check too.
    try {
      check(theirs, -1, expected);
    } catch (const Error&) {
      send_all(fd.fd, &mine, sizeof mine, {}, until);
      throw;
    }
    const std::string who = "peer " + std::to_string(peer);
    if (fds.size() != 2 || !is_eventfd(fds[1].fd)) {
      refuse(Code::data_loss, who + " sent no shared-memory mapping and eventfd");
    }
    const std::size_t bytes = shm::mapping_bytes(t.options.slot_bytes, t.options.slots);
    struct stat st{};
    const int seals = ::fcntl(fds[0].fd, F_GET_SEALS);
    if (::fstat(fds[0].fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        static_cast<std::size_t>(st.st_size) != bytes || seals < 0 ||
        (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) != (F_SEAL_SHRINK | F_SEAL_GROW)) {
      refuse(Code::data_loss, who + " sent a shared-memory mapping that is not a sealed memfd of " +
                                  std::to_string(bytes) + " bytes");
    }
    Mapping map = map_fd(fds[0].fd, bytes);
    why = shm::check_pair(map.base, bytes, t.options.slot_bytes, t.options.slots);
    if (!why.empty()) refuse(Code::data_loss, who + ": " + why);
    mine.can_read = probe_read(cred.pid, theirs.probe_address, theirs.probe_value);
    uint32_t they_read = 0;
    std::vector<Fd> none;
    why = send_all(fd.fd, &mine, sizeof mine, {t.doorbell.fd}, until);
    if (why.empty()) why = recv_all(fd.fd, &they_read, sizeof they_read, none, 0, until);
    if (!why.empty()) refuse(Code::unavailable, who + " broke off the handshake: " + why);
    adopt(peer, std::move(fd), cred.pid, std::move(fds[1]), std::move(map), 1, they_read != 0);
    return peer;
  }
};

}  // namespace

void ShmTransport::Impl::connect_all(const HostsFile& hosts, const std::vector<int>& peers) {
  try {
    connect_pairs(hosts, peers);
  } catch (const Error& e) {
    // The peers already joined would otherwise see only this process end without a goodbye and
    // blame it; its abort names the peer at fault (one that never connected, or broke off).
    live.clear();
    for (auto& p : pairs) {
      if (p) live.push_back(p.get());
    }
    publish_abort(e.what());
    throw;
  }
}

void ShmTransport::Impl::connect_pairs(const HostsFile& hosts, const std::vector<int>& peers) {
  pairs.resize(world);
  std::set<int> to_connect, to_accept;
  for (int p : peers) {
    if (p < 0 || p >= world || p == rank) {
      fail(Code::invalid_argument, prefix() + "cannot talk to peer " + std::to_string(p) +
                                       " (world of " + std::to_string(world) + ")");
    }
    (p < rank ? to_connect : to_accept).insert(p);
  }
  doorbell = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (doorbell.fd < 0) fail(Code::unavailable, prefix() + "eventfd: " + errno_text(errno));
  Setup s{*this, hosts, Clock::now() + options.connect_timeout, boot_id(), 0, {}};
  s.probe = os_random_u64("shared memory's probe");
  Fd listener;
  const std::string my_name = socket_name(hosts.peers[rank]);
  if (!to_accept.empty()) {
    listener = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    sockaddr_un addr;
    const socklen_t len = abstract_address(my_name, addr);
    if (listener.fd < 0 || ::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listener.fd, SOMAXCONN) != 0) {
      fail(Code::unavailable,
           prefix() + "cannot listen on the shared-memory socket @" + my_name + " (" +
               hosts.name() + ", peers[" + std::to_string(rank) + "]): " + errno_text(errno) +
               (errno == EADDRINUSE ? " (another run with the same hosts file on this machine?)"
                                    : ""));
    }
  }
  // Connections go from higher to lower ranks only, and rank 0 only accepts, so doing the
  // connects first and the accepts after cannot wait in a circle.
  for (int p : to_connect) s.connect_to(p);
  std::set<int> outstanding = to_accept;
  while (!outstanding.empty() && Clock::now() < s.deadline) {
    check_stop(options.stop, prefix());
    // In slices, so that a signal (options.stop) ends the wait within one.
    if (!wait_for(listener.fd, POLLIN,
                  std::min(s.deadline, Clock::now() + std::chrono::milliseconds(100)))) {
      continue;
    }
    Fd fd(::accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.fd < 0) continue;
    const int joined = s.accept_one(std::move(fd), outstanding);
    if (joined >= 0) outstanding.erase(joined);
  }
  std::string missing;
  for (int p : to_connect) {
    if (pairs[p]) continue;
    auto it = s.last_error.find(p);
    missing += "\n  peer " + std::to_string(p) + " (@" + socket_name(hosts.peers[p]) +
               ") never answered (" + (it == s.last_error.end() ? "no answer" : it->second) + ")";
  }
  for (int p : outstanding) {
    missing += "\n  peer " + std::to_string(p) + " never connected";
  }
  if (!missing.empty()) {
    fail(Code::deadline_exceeded,
         prefix() + "shared-memory set-up timed out after " +
             std::to_string(options.connect_timeout.count()) + " ms (every peer on this host " +
             "must run with the same --transport):" + missing);
  }
  for (auto& p : pairs) {
    if (p) live.push_back(p.get());
  }
}

}  // namespace dpg::net
