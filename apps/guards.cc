#include "apps/guards.h"
#include "apps/peer_memory.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "runtime/core/error.h"

namespace dpg::app {
namespace {

std::string& activity_text() {
  static std::string text;
  return text;
}

}  // namespace

void set_activity(std::string what) { activity_text() = std::move(what); }
const std::string& activity() { return activity_text(); }

void check_output_path(const std::string& path, const std::string& flag, OutputKind kind) {
  if (path.empty()) return;
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path parent = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::exists(parent, ec)) {
    fs::create_directories(parent, ec);
    if (ec) {
      fail(Code::failed_precondition, flag + " " + path + ": cannot create the folder " +
                                          parent.string() + ": " + ec.message());
    }
  }
  if (!fs::is_directory(parent, ec)) {
    fail(Code::failed_precondition,
         flag + " " + path + ": " + parent.string() + " is not a folder");
  }
  if (fs::is_directory(p, ec)) fail(Code::failed_precondition, flag + " " + path + " is a folder");
  if (::access(parent.c_str(), W_OK) != 0) {
    fail(Code::failed_precondition,
         flag + " " + path + ": the folder " + parent.string() + " is not writable");
  }
  if (fs::exists(p, ec) && ::access(p.c_str(), W_OK) != 0) {
    fail(Code::failed_precondition, flag + " " + path + " is not writable");
  }
  if (kind == OutputKind::replaced && fs::exists(p, ec) && !fs::is_regular_file(p, ec)) {
    fail(Code::failed_precondition,
         flag + " " + path + " is not a regular file (a device, FIFO or socket): this output is "
                             "written to a new file and renamed into place, so name a file");
  }
}

void append_checked(const std::string& path, const std::string& text, const std::string& what) {
  // Opened without blocking, so that a FIFO nobody reads is an error (ENXIO) rather than a wait
  // without end; the writes below block as usual.
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0666);
  if (fd < 0) {
    fail(Code::failed_precondition,
         what + ": cannot append to " + path + ": " +
             (errno == ENXIO ? std::string("a FIFO that no process reads") : std::strerror(errno)));
  }
  ::fcntl(fd, F_SETFL, O_APPEND);  // blocking again
  struct stat st{};
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  int err = 0;
  for (std::size_t done = 0; done < text.size() && err == 0;) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    else done += static_cast<std::size_t>(n);
  }
  if (err != 0 && regular) {
    // This process is the file's one writer (rank 0), so its length before is where the torn
    // line starts.
    while (::ftruncate(fd, st.st_size) != 0 && errno == EINTR) {
    }
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) {
    fail(Code::failed_precondition,
         what + ": write to " + path + " failed: " + std::strerror(err) +
             (regular ? " (the file is as it was before this line)" : ""));
  }
}

std::uint64_t estimate_train_bytes(const TrainConfig& c, std::uint64_t features, std::uint64_t classes,
                                   std::uint64_t data_bytes, int world) {
  const double batch = std::ceil(c.batch_size / std::max(world, 1));
  const double bytes = model_and_step_bytes(static_cast<double>(features),
                                            static_cast<double>(classes), c.hidden, batch,
                                            pass_rows_for(c, features, classes)) +
                       static_cast<double>(data_bytes);
  if (!(bytes < 1.8e19)) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace dpg::app

#include "runtime/core/bounds.h"
#include "runtime/data/dataset.h"

namespace dpg::app {

void check_train_outputs(const TrainConfig& c) {
  check_output_path(c.metrics, "--metrics");
  check_output_path(c.trace, "--trace", OutputKind::replaced);
}

void require_train_memory(const TrainConfig& c, const data::Prepared& d, int world) {
  const std::uint64_t data_bytes =
      (d.train.features.size() + d.test.features.size()) * sizeof(float) +
      (d.train.labels.size() + d.test.labels.size()) * sizeof(std::int32_t);
  const std::uint64_t need =
      estimate_train_bytes(c, d.train.cols, static_cast<std::uint64_t>(d.train.num_classes),
                           data_bytes, world);
  std::string hidden;
  for (int h : c.hidden) {
    if (!hidden.empty()) hidden += ',';
    hidden += std::to_string(h);
  }
  require_memory(need,
                 "train: a model of hidden " + shorten(hidden) + " on " +
                     std::to_string(d.train.cols) + " features and " +
                     std::to_string(d.train.num_classes) + " classes, with a batch of " +
                     std::to_string(static_cast<long long>(c.batch_size)),
                 "lower --hidden or --batch-size");
}

}  // namespace dpg::app
