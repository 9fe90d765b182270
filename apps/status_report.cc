#include "apps/status_report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <string>
#include <thread>

#include "apps/status_page.h"
#include "apps/version.h"
#include "runtime/core/json_io.h"

namespace dpg::app {
namespace {

// "model name : X" of /proc/cpuinfo's first processor, or "" where there is none.
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  for (int i = 0; i < 4096 && std::getline(in, line); ++i) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    return line.substr(line.find_first_not_of(" \t", colon + 1));
  }
  return "";
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

Json run_environment() {
  Json e;
  e["dpgossip_commit"] = DPG_COMMIT;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) e["host"] = host;
  utsname u{};
  if (::uname(&u) == 0) {
    e["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  }
  e["cpu"] = cpu_model();
  e["cores"] = std::thread::hardware_concurrency();
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) e["memory_bytes"] = static_cast<double>(pages) * page;
  e["written"] = utc_now();
  return e;
}

std::string status_report_html(const Json& status, const Json& environment) {
  // The page with its data inside: a script that sets DPG_REPORT, which the page draws once
  // instead of polling. "</" could end the script early; JSON may spell it "<\/".
  std::string data =
      Json{{"status", status}, {"environment", environment}}.dump(
          -1, ' ', false, Json::error_handler_t::replace);
  for (size_t at = 0; (at = data.find("</", at)) != std::string::npos; at += 3) {
    data.replace(at, 2, "<\\/");
  }
  std::string page = status_html();
  const std::string anchor = "<script>\n\"use strict\";";
  const size_t at = page.find(anchor);
  page.insert(at == std::string::npos ? page.size() : at,
              "<script>window.DPG_REPORT = " + data + ";</script>\n");
  return page;
}

void write_status_report(const std::string& path, const StatusBoard& board) {
  const Json status = board.status();
  const Json& facts = status["facts"];
  Json environment = facts.is_object() && facts.contains("environment") ? facts["environment"]
                                                                        : run_environment();
  if (environment.contains("written")) environment["run_started"] = environment["written"];
  environment["written"] = utc_now();
  write_file_atomic(path, status_report_html(status, environment));
}

}  // namespace dpg::app
