// The wire protocol of `difflens serve` (app/remote/server.h) and its client (app/remote/client.h): what a
// request may ask, as JSON read with every field checked, and the limits a server refuses requests beyond.
// Replies carrying a trace are trace_to_bytes() (core/formats/trace_io.h). Plain C++, no LibTorch and no
// network code, so the request parser is fuzzed alone (tests/fuzz/fuzz_remote_request.cpp). The API as a user
// sees it (endpoints, headers, curl) is in core/FORMATS.md, "Remote protocol".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/formats/data.h"
#include "core/formats/error.h"
#include "core/formats/needle_records.h"

namespace difflens::remote {

constexpr int kProtocolVersion = 1;

// A request the server will not run: `status` is the HTTP status it answers with (400 malformed, 401 no
// or wrong token, 404 no such model, 409 superseded by the same client's newer request, 413 too large,
// 503 too many requests at once), the message says why with the numbers.
class RequestError : public Error {
 public:
  RequestError(int status, const std::string& message) : Error(message), status(status) {}
  int status;
};

// What one server accepts; every refusal happens before any model work.
struct Limits {
  int64_t max_tokens = 16384;                   // tokens of one prompt (and the model's context)
  size_t max_request_bytes = 16u << 20;         // a request body (prompt text, haystack text)
  double max_reply_bytes = 4.0 * (1ull << 30);  // arrays one reply may carry (maps, logits, hidden)
  int max_active = 8;                           // requests queued or running, all clients together
  int64_t max_needle_tokens = 16384;            // a needle cell's context
  std::string to_json() const;                  // what GET /v1/info reports
};

// POST /v1/capture
struct CaptureRequest {
  int model = 0;                        // index into the server's --models
  std::optional<std::string> prompt;    // text for the model's tokenizer, or
  std::vector<int64_t> token_ids;       // the ids themselves (exactly one of the two)
  bool bos = true;                      // text only: start with the tokenizer's BOS
  Specials specials = Specials::match;  // text only: "<|endoftext|>" written in it matched, or read as text
  bool keep_maps = true;
  std::vector<int> layers, heads;  // kept maps (empty: all)
  bool keep_logits = false, keep_hidden = false, keep_qkv = false;
  int top_k = 10;                    // next-token candidates
  int position_top_k = 0;            // every position's candidates (0: none)
  int logit_bits = -1;               // -1: the model's setting; 0: exact; 2..32: quantized
  uint64_t pooled_budget_bytes = 0;  // > 0: long-prompt mode (core/model/model.h CaptureOptions)
  bool stream = false;               // progress lines before the trace (FORMATS.md)
  // Interventions (core/formats/intervention.h), each checked as text here and resolved by the server against
  // its model and the prompt: the answer's tokens [first, second) and the query row (-1: none / the last).
  std::vector<std::string> interventions;
  int64_t answer_begin = -1, answer_end = -1, query = -1;
};
// Throws RequestError(400 or 413) naming the field that is wrong.
CaptureRequest parse_capture_request(const std::string& body, const Limits& limits);
std::string to_json(const CaptureRequest& request);

// POST /v1/tile: an exact tile of the last trace the same client captured with `model`.
struct TileRequest {
  int model = 0;
  int layer = 0, head = 0;
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
};
TileRequest parse_tile_request(const std::string& body, const Limits& limits);
std::string to_json(const TileRequest& request);

// POST /v1/tokenize
struct TokenizeRequest {
  int model = 0;
  std::string text;
  bool bos = true;
  Specials specials = Specials::match;
};
TokenizeRequest parse_tokenize_request(const std::string& body, const Limits& limits);
std::string to_json(const TokenizeRequest& request);

// POST /v1/needle: one episode of the needle lab, built from the haystack text sent along.
struct NeedleRequest {
  int model = 0;
  NeedleCell cell;
  uint64_t seed = 1;
  std::string haystack;  // the text episodes are built from (the client's haystack file)
  NameSet names = NameSet::SingleToken;
  NeedleTemplate wording;
  int logit_bits = 0;
  std::vector<std::string> interventions;  // as written (run_needle resolves them per question)
};
NeedleRequest parse_needle_request(const std::string& body, const Limits& limits);
std::string to_json(const NeedleRequest& request);

// A needle run as JSON, the one writer of it, in the form each reader needs; every form starts from the
// run's cell, seed, tokens and answers (length, depth, needles, queried, seed, tokens, answered, asked):
// - Protocol: every field, so the lab shows a remote run as a local one (needle_run_from_json reads it back).
// - Report: a run of needle.json (core/FORMATS.md): the replies and truths, the last question's means as
//   flat fields, per layer, the while-answering masses and the strongest head, the placed depth.
// - Episode: a kept episode's episode.json: the ids, the code, the spans and the interventions (the model's
//   name is the caller's).
enum class NeedleJson { Protocol, Report, Episode };
std::string needle_run_to_json(const NeedleRun& run, NeedleJson form = NeedleJson::Protocol);
NeedleRun needle_run_from_json(const std::string& text);  // FormatError when it is not one

// The body of every refusal: {"error": message, "status": status}. error_message() reads it back (or
// returns the body itself, shortened, when it is not one).
std::string error_json(int status, const std::string& message);
std::string error_message(const std::string& body);

}  // namespace difflens::remote
