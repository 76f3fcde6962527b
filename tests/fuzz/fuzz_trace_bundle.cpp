// Fuzz target: a trace bundle (trace.json, then maps.safetensors after fuzz::kSeparator), read as the app
// opens one, then used as its panels use it: exact tiles of every kept head (recomputed from queries and
// keys for pooled layers), the attention-noise readout and the byte accounting.
#include <algorithm>

#include "core/formats/error.h"
#include "core/formats/metrics.h"
#include "core/formats/tiles.h"
#include "core/formats/trace_io.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  const auto parts = fuzz::split(data, size, 2);
  const std::filesystem::path dir = fuzz::empty_dir("bundle");
  fuzz::write_file(dir / "trace.json", parts[0]);
  if (parts.size() > 1) fuzz::write_file(dir / "maps.safetensors", parts[1]);
  Trace t;
  try {
    t = read_trace_bundle(dir);
  } catch (const Error&) {
    return 0;
  }
  const int64_t T = t.length();
  (void)t.kept_bytes();
  (void)t.byte_size();
  for (const LayerTrace& l : t.layers) {
    for (int k = 0; k <= ValueStats::kTopK + 1; ++k) (void)l.logit_stats.top_k(k);
    (void)l.logit_stats.histogram.quantile(0.5);
    for (int head : l.heads) {
      if (!tile_available(t, l.index, head)) continue;
      try {
        const int64_t n = std::min<int64_t>(T, 6);
        const AttentionTile tile = attention_tile(t, l.index, head, T - n, n, 0, n);
        FUZZ_CHECK(tile.a.size() == static_cast<size_t>(n * n));
      } catch (const Error&) {
      }
    }
  }
  if (T >= 2) {
    try {
      (void)attention_noise(t, {0, 1}, {T - 1, T});
    } catch (const Error&) {
    }
  }
  return 0;
}
