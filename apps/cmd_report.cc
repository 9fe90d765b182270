// `dpgossip report RUN_DIR`: one self-contained HTML file of a finished run, made from its
// metrics file (apps/run_report.h): the page `train --report` writes, with no run needed.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "apps/commands.h"
#include "apps/run_report.h"
#include "apps/status_report.h"
#include "runtime/core/error.h"

namespace dpg::app {
namespace {

struct ReportFlags {
  std::string path;  // a run's folder (its metrics.jsonl) or a metrics file
  std::string run;   // "": the last run in the file
  std::string out;   // "": NAME.html beside the metrics file
};

// A run name as a file name: what is not a letter, digit, '.', '-' or '_' becomes '_'.
std::string file_name_of(const std::string& run) {
  std::string s;
  for (const char c : run) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '.' || c == '-' || c == '_';
    s += plain ? c : '_';
  }
  if (s.empty() || s[0] == '.') s = "run" + s;
  return s.substr(0, 200);
}

void run_report(const ReportFlags& f) {
  const std::string metrics = metrics_file_of(f.path);
  StatusBoard board;
  const RunLines lines = load_run(metrics, f.run, board);
  const std::string out =
      !f.out.empty() ? f.out
                     : (std::filesystem::path(metrics).parent_path() /
                        (file_name_of(lines.run) + ".html")).string();
  write_status_report(out, board);
  std::cout << "report of run " << lines.run << " (" << lines.lines << " lines of " << metrics
            << (lines.ended ? "" : "; no summary: it did not finish") << ") written to " << out
            << "\n";
}

}  // namespace

void add_report(CLI::App& app) {
  auto f = std::make_shared<ReportFlags>();
  auto* cmd = app.add_subcommand(
      "report", "Write one self-contained HTML report of a run from its metrics file "
                "(docs/STATUS.md)");
  cmd->add_option("path", f->path,
                  "the run's folder (its metrics.jsonl, e.g. runs) or a metrics file")
      ->required();
  cmd->add_option("--run", f->run, "the run's name (default: the last run in the file)");
  cmd->add_option("-o,--out", f->out, "the report's path (default: RUN.html beside the metrics file)");
  cmd->callback([f] { run_report(*f); });
}

}  // namespace dpg::app
