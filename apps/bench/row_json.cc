#include "apps/bench/row_json.h"

#include <algorithm>
#include <cstddef>
#include <sstream>

#include "runtime/core/error.h"

namespace dpg::bench {
namespace {

// The object has exactly `keys`: a typo or a row of another kind never passes silently.
JsonReader reader(const Json& j, const std::string& where, const std::vector<std::string>& keys) {
  if (!j.is_object()) fail(Code::invalid_argument, where + ": expected a JSON object");
  JsonReader in(j, where);
  for (const auto& item : j.items()) {
    if (std::find(keys.begin(), keys.end(), item.key()) == keys.end())
      in.fail_at(item.key(), "unknown key for this row");
  }
  return in;
}

int count(const JsonReader& in, const std::string& key, long long lo, long long hi) {
  const long long v = in.integer(key);
  if (v < lo || v > hi)
    in.fail_at(key, "expected " + std::to_string(lo) + " to " + std::to_string(hi) + ", got " +
                        std::to_string(v));
  return static_cast<int>(v);
}

double non_negative(const JsonReader& in, const std::string& key) {
  const double v = in.number(key);
  if (!(v >= 0)) in.fail_at(key, "expected a non-negative number");
  return v;
}

// "cpu" or "cuda:N" (N decimal digits): the devices a step row names.
bool is_device(const std::string& d) {
  if (d == "cpu") return true;
  const std::string prefix = "cuda:";
  if (d.size() <= prefix.size() || d.compare(0, prefix.size(), prefix) != 0) return false;
  return std::all_of(d.begin() + static_cast<std::ptrdiff_t>(prefix.size()), d.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// Each non-blank line through `one`, with the line's number in `where`.
template <typename Row, typename Parse>
std::vector<Row> parse_lines(const std::string& text, const std::string& source, Parse one) {
  std::vector<Row> rows;
  std::istringstream lines(text);
  int line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = source + " line " + std::to_string(line_no);
    Json j;
    try {
      j = Json::parse(line);
    } catch (const Json::parse_error& e) {
      fail(Code::data_loss, where + ": not a JSON row (" + e.what() + "): " + line);
    }
    try {
      rows.push_back(one(j, where));
    } catch (const Error& e) {
      fail(Code::data_loss, std::string(e.what()) + ": " + line);
    }
  }
  return rows;
}

}  // namespace

AllreduceRow allreduce_row_from_json(const Json& j, const std::string& where) {
  const JsonReader in = reader(j, where, allreduce_keys());
  AllreduceRow r;
  r.backend = in.string("backend");
  r.peers = count(in, "peers", 1, 1'000'000);
  r.bytes = in.integer("bytes");
  if (r.bytes < 0) in.fail_at("bytes", "expected a non-negative size");
  r.time_us = non_negative(in, "time_us");
  r.algbw_GBps = non_negative(in, "algbw_GBps");
  r.busbw_GBps = non_negative(in, "busbw_GBps");
  r.repeats = count(in, "repeats", 0, 1'000'000'000);
  r.ok = in.boolean("ok");
  return r;
}

StepRow step_row_from_json(const Json& j, const std::string& where) {
  const JsonReader in = reader(j, where, step_keys());
  StepRow r;
  r.backend = in.string("backend");
  r.device = in.string("device");
  if (!is_device(r.device))
    in.fail_at("device", "expected cpu or cuda:N, got \"" + r.device + "\"");
  r.mode = in.string("mode");
  if (r.mode != "sgd" && r.mode != "dpsgd") in.fail_at("mode", "expected sgd or dpsgd");
  r.threads = count(in, "threads", 1, 1 << 16);
  r.batch = count(in, "batch", 1, 1 << 30);
  r.samples_per_second = non_negative(in, "samples_per_second");
  return r;
}

std::vector<AllreduceRow> parse_allreduce_rows(const std::string& text, const std::string& source) {
  return parse_lines<AllreduceRow>(text, source, allreduce_row_from_json);
}

std::vector<StepRow> parse_step_rows(const std::string& text, const std::string& source) {
  return parse_lines<StepRow>(text, source, step_row_from_json);
}

}  // namespace dpg::bench
