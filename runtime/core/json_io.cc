#include "runtime/core/json_io.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <vector>
#include <sstream>

#include "runtime/core/bounds.h"
#include "runtime/core/error.h"

namespace dpg {

Json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(Code::not_found, path + ": cannot open file");
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  return parse_json_text(text, path);
}

Json parse_json_text(std::string_view text, const std::string& where) {
  // nlohmann keeps the last of two equal keys silently; a config or hosts file that says one
  // thing twice is more likely a mistake than a wish, so the parse refuses it.
  std::vector<std::set<std::string>> keys;  // of each object being parsed
  std::string duplicate;
  const Json::parser_callback_t check = [&](int, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: keys.emplace_back(); break;
      case Json::parse_event_t::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default: break;
    }
    return true;
  };
  Json j;
  try {
    j = Json::parse(text.begin(), text.end(), check);
  } catch (const Json::exception& e) {
    // parse_error for bad syntax, and out_of_range (406) for a number too large for a double
    // ("1e400"): both are the file's fault, not a bug here.
    fail(Code::invalid_argument, where + ": not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) {
    fail(Code::invalid_argument,
         where + ": the key \"" + shorten(duplicate) + "\" appears twice in one object");
  }
  return j;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(Code::failed_precondition, path + ": cannot create " + tmp);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      fail(Code::failed_precondition, path + ": write failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail(Code::failed_precondition, path + ": cannot rename into place: " + ec.message());
  }
}

JsonReader::JsonReader(const Json& object, std::string where)
    : object_(object), where_(std::move(where)) {
  if (!object_.is_object()) fail(Code::invalid_argument, where_ + ": expected a JSON object");
}

std::string JsonReader::path(const std::string& key) const { return where_ + "/" + key; }

void JsonReader::fail_at(const std::string& key, const std::string& what) const {
  fail(Code::invalid_argument, path(key) + ": " + what);
}

bool JsonReader::has(const std::string& key) const { return object_.contains(key); }

const Json& JsonReader::at(const std::string& key) const {
  if (!has(key)) fail_at(key, "missing");
  return object_.at(key);
}

double JsonReader::number(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_number()) fail_at(key, "expected a number, got " + v.dump());
  return v.get<double>();
}

long long JsonReader::integer(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_number_integer()) fail_at(key, "expected an integer, got " + v.dump());
  return v.get<long long>();
}

bool JsonReader::boolean(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_boolean()) fail_at(key, "expected true or false, got " + v.dump());
  return v.get<bool>();
}

std::string JsonReader::string(const std::string& key) const {
  const Json& v = at(key);
  if (!v.is_string()) fail_at(key, "expected a string, got " + v.dump());
  return v.get<std::string>();
}

void JsonReader::reject_unknown(std::initializer_list<std::string_view> known) const {
  for (const auto& [key, value] : object_.items()) {
    bool ok = false;
    for (auto k : known) ok = ok || (k == key);
    if (!ok) fail_at(key, "unknown field");
  }
}

}  // namespace dpg
