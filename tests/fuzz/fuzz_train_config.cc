// The training config: JSON text (with the duplicate-key check), train_config_from_json (which
// validates), and what is done with a config that passes.
#include <cstdint>
#include <string_view>

#include "runtime/core/json_io.h"
#include "runtime/core/train_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return dpg::fuzz::run([&] {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const dpg::Json doc = dpg::parse_json_text(text, "config.json");
    const dpg::TrainConfig c = dpg::train_config_from_json(doc, "config.json:");
    (void)dpg::describe(c);
    (void)dpg::shared_settings_hash(c);
    (void)dpg::to_json(c).dump();
  });
}
