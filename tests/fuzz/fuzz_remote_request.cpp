// Fuzz target: what `difflens serve` reads from a client (capture, tile, tokenize and needle requests) and
// what its client reads back (a trace as one safetensors buffer, a needle run, an error body). The first
// byte picks the reader; the rest is its input. A reader may refuse only with difflens::Error; what it
// accepts must hold its invariants and, for requests, read back the same after the client's writer.
#include "core/formats/error.h"
#include "core/formats/remote.h"
#include "core/formats/trace_io.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace difflens;
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  remote::Limits limits;
  limits.max_request_bytes = 1 << 16;
  limits.max_tokens = 4096;
  try {
    switch (data[0] % 7) {
      case 0: {
        const remote::CaptureRequest r = remote::parse_capture_request(body, limits);
        FUZZ_CHECK(r.prompt.has_value() != !r.token_ids.empty());
        FUZZ_CHECK(static_cast<int64_t>(r.token_ids.size()) <= limits.max_tokens);
        FUZZ_CHECK(r.logit_bits == -1 || r.logit_bits == 0 || (r.logit_bits >= 2 && r.logit_bits <= 32));
        const remote::CaptureRequest back = remote::parse_capture_request(remote::to_json(r), limits);
        FUZZ_CHECK(back.token_ids == r.token_ids && back.layers == r.layers && back.heads == r.heads &&
                   back.top_k == r.top_k && back.pooled_budget_bytes == r.pooled_budget_bytes);
        break;
      }
      case 1: {
        const remote::TileRequest r = remote::parse_tile_request(body, limits);
        FUZZ_CHECK(r.rows >= 1 && r.cols >= 1 && r.row0 >= 0 && r.col0 >= 0);
        (void)remote::parse_tile_request(remote::to_json(r), limits);
        break;
      }
      case 2:
        (void)remote::parse_tokenize_request(body, limits);
        break;
      case 3: {
        const remote::NeedleRequest r = remote::parse_needle_request(body, limits);
        FUZZ_CHECK(r.cell.queried >= 1 && r.cell.queried <= r.cell.needles && !r.haystack.empty());
        (void)remote::parse_needle_request(remote::to_json(r), limits);
        break;
      }
      case 4: {
        const NeedleRun run = remote::needle_run_from_json(body);
        FUZZ_CHECK(run.attention.per_layer.size() == run.attention.layers.size());
        (void)remote::needle_run_to_json(run);
        break;
      }
      case 5: {
        const Trace t = trace_from_bytes(body, "reply");
        (void)t.byte_size();
        (void)trace_to_bytes(t);
        break;
      }
      default:
        (void)remote::error_message(body);
    }
  } catch (const Error&) {
  }
  return 0;
}
