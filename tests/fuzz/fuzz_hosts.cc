// The hosts file: JSON text (with the duplicate-key check) and then its validation.
#include <cstdint>
#include <string_view>

#include "runtime/core/json_io.h"
#include "runtime/net/hosts.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dpg::fuzz::run([&] {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const dpg::Json doc = dpg::parse_json_text(text, "hosts.json");
    const dpg::net::HostsFile h = dpg::net::parse_hosts(doc, "hosts.json");
    (void)dpg::net::to_json(h).dump();
  });
}
