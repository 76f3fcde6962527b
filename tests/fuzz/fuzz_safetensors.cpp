// Fuzz target: one .safetensors file (header JSON, offsets, dtypes, data) read as a checkpoint would be:
// every tensor looked up by name and converted to F32.
#include "core/formats/error.h"
#include "core/formats/safetensors.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  const std::filesystem::path file = fuzz::scratch() / "model.safetensors";
  fuzz::write_file(file, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const SafetensorsFile f(file);
    for (const TensorInfo& t : f.tensors()) {
      FUZZ_CHECK(f.find(t.name) == &f.at(t.name));  // lookup by name gives the same entry
      if (!t.other_dtype.empty()) {                 // checked, never read: reading it is refused by name
        bool refused = false;
        try {
          (void)f.read_f32(t);
        } catch (const Error& e) {
          refused = std::string(e.what()).find(t.name) != std::string::npos;
        }
        FUZZ_CHECK(refused);
        continue;
      }
      const std::vector<float> v = f.read_f32(t);
      FUZZ_CHECK(static_cast<int64_t>(v.size()) == t.numel());
    }
    (void)f.find("no such tensor");
  } catch (const Error&) {
  }
  return 0;
}
