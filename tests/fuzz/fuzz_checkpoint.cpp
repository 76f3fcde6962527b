// Fuzz target: a checkpoint directory. One part: model.safetensors. Several parts (split at
// fuzz::kSeparator): model.safetensors.index.json and the shards model-0000{1,2}-of-00002.safetensors it may
// name. Everything the model loader asks of CheckpointFiles is asked.
#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  const auto parts = fuzz::split(data, size, 3);
  const std::filesystem::path dir = fuzz::empty_dir("checkpoint");
  if (parts.size() == 1) {
    fuzz::write_file(dir / "model.safetensors", parts[0]);
  } else {
    fuzz::write_file(dir / "model.safetensors.index.json", parts[0]);
    fuzz::write_file(dir / "model-00001-of-00002.safetensors", parts[1]);
    if (parts.size() > 2) fuzz::write_file(dir / "model-00002-of-00002.safetensors", parts[2]);
  }
  try {
    const CheckpointFiles files(dir);
    uint64_t bytes = 0;
    for (const std::string& name : files.names()) {
      const CheckpointFiles::Entry* e = files.find(name);
      FUZZ_CHECK(e != nullptr);  // every listed name can be found
      bytes += e->info->end - e->info->begin;
      (void)files.describe_source(name);
      if (e->info->numel() <= (1 << 16)) (void)e->file->read_f32(*e->info);
    }
    FUZZ_CHECK(bytes == files.bytes());
    (void)files.dtype_summary();
  } catch (const Error&) {
  }
  return 0;
}
