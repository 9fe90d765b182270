#include "apps/run_report.h"

#include <filesystem>
#include <functional>
#include <string_view>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/json_io.h"

namespace dpg::app {
namespace {

// Calls `take(line number, text)` for every non-blank line of the file, within the bounds.
void each_line(const std::string& path,
               const std::function<void(std::size_t, std::string_view)>& take) {
  std::string line;
  std::size_t number = 0;
  auto emit = [&] {
    ++number;
    if (line.find_first_not_of(" \t\r") != std::string::npos) take(number, line);
    line.clear();
  };
  read_regular_file_chunks(path, kMaxReportMetricsBytes, "a metrics file",
                           [&](std::string_view chunk) {
                             for (std::size_t at = 0; at < chunk.size();) {
                               const std::size_t nl = chunk.find('\n', at);
                               const std::size_t end = nl == std::string_view::npos ? chunk.size() : nl;
                               line.append(chunk.substr(at, end - at));
                               if (line.size() > kMaxReportLineBytes) {
                                 fail(Code::invalid_argument,
                                      path + ":" + std::to_string(number + 1) + ": a line of more than " +
                                          std::to_string(kMaxReportLineBytes >> 20) +
                                          " MiB is no metrics line");
                               }
                               if (nl == std::string_view::npos) break;
                               emit();
                               at = nl + 1;
                             }
                           });
  if (!line.empty()) emit();
}

std::string text_of(const Json& line, const char* key) {
  return line.contains(key) && line[key].is_string() ? line[key].get<std::string>() : "";
}

Json parse_line(const std::string& path, std::size_t number, std::string_view text) {
  Json line = parse_json_text(text, path + ":" + std::to_string(number));
  if (!line.is_object()) {
    fail(Code::invalid_argument, path + ":" + std::to_string(number) + ": not a JSON object");
  }
  return line;
}

}  // namespace

std::string metrics_file_of(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return (std::filesystem::path(path) / "metrics.jsonl").string();
  return path;
}

RunLines load_run(const std::string& path, const std::string& run, StatusBoard& board) {
  // First pass: which run, and the line its last facts line is on.
  std::string chosen = run;
  std::size_t start = 0;  // line number of the chosen run's last facts line
  bool named_seen = false;
  each_line(path, [&](std::size_t n, std::string_view text) {
    const Json line = parse_line(path, n, text);
    const std::string name = text_of(line, "run");
    if (!run.empty() && name == run) named_seen = true;
    if (text_of(line, "kind") != "facts") return;
    if (run.empty()) chosen = name;
    if (name == chosen) start = n;
  });
  if (!run.empty() && !named_seen) {
    fail(Code::invalid_argument, path + ": no line of a run named '" + run + "'");
  }
  if (start == 0) {
    fail(Code::invalid_argument,
         path + (run.empty() ? ": no run with a facts line"
                             : ": run '" + run + "' has no facts line") +
             " (kind \"facts\", which rank 0 writes first; runs of dpgossip before it have none)");
  }
  // Second pass: the run's lines from there on, onto the board.
  RunLines out;
  out.run = chosen;
  each_line(path, [&](std::size_t n, std::string_view text) {
    if (n < start) return;
    Json line = parse_line(path, n, text);
    if (text_of(line, "run") != chosen) return;
    const std::string kind = text_of(line, "kind");
    ++out.lines;
    if (kind == "facts") {
      board.start(line, {});
    } else if (kind == "epoch") {
      board.add_epoch(line);
    } else if (kind == "consensus") {
      board.add_consensus(line);
    } else if (kind == "peers") {
      board.restore_live(line.contains("live") ? line["live"] : Json());
    } else if (kind == "summary" || kind == "stopped") {
      board.finish(line);
      out.ended = true;
    }
  });
  if (!out.ended) {
    board.fail("the metrics file holds no summary of this run after its start: it failed, was "
               "killed, or is still running");
  }
  return out;
}

}  // namespace dpg::app
