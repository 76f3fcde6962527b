// The client side of `difflens serve` (app/remote/server.h): what the app's worker and `difflens capture`
// call when a model slot is remote://HOST:PORT/INDEX. One RemoteClient per thread (it opens a connection
// per request). Every failure is an Error saying what happened: the server cannot be reached, refused the
// token, refused the request (its message), or answered with something that is not a trace.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/config.h"
#include "core/formats/error.h"
#include "core/formats/remote.h"
#include "core/formats/tiles.h"
#include "core/formats/trace.h"
#include "core/model/needle.h"

namespace difflens::app {

// The server could not be reached or the connection broke (as opposed to a refusal, which is an Error
// with the server's message).
class RemoteUnreachable : public Error {
 public:
  using Error::Error;
};

struct RemoteAddress {
  std::string host;
  int port = 8765;
  int model = -1;            // the server's model index; -1: not given (the caller picks, e.g. the slot's)
  std::string token;         // from ?token=..., else the environment's DIFFLENS_TOKEN
  std::string text() const;  // remote://HOST:PORT/MODEL, without the token
};

bool is_remote(const std::string& spec);  // starts with remote://
// The spec without its ?token=... (what may be shown on screen or in logs); other text unchanged.
std::string without_token(const std::string& spec);
// remote://HOST:PORT[/MODEL][?token=TOKEN]. Throws Error saying what is wrong and showing the form.
RemoteAddress parse_remote(const std::string& spec);

struct RemoteModelInfo {
  int index = 0;
  std::string path, description, device, tokenizer_note;
  bool can_encode = true;
  int logit_bits = 0;
  ModelConfig config;
};

struct RemoteCapture {
  std::shared_ptr<Trace> trace;
  std::vector<std::pair<size_t, size_t>> offsets;  // byte span of each token in the prompt text
  double round_trip_ms = 0;                        // request sent to trace read, as this client saw it
  double server_ms = 0;                            // the capture itself on the server
  size_t bytes = 0;                                // the reply's size
};

class RemoteClient {
 public:
  // `client_id` names this client to the server (its latest-wins rule); empty: a random one.
  explicit RemoteClient(RemoteAddress address, std::string client_id = "");

  const RemoteAddress& address() const { return address_; }
  const std::string& client_id() const { return client_id_; }
  // Seconds a request may take before it is given up (default 600: a 64K capture of a large model).
  void set_timeout(int seconds) { timeout_s_ = seconds; }

  // GET /v1/info
  std::vector<RemoteModelInfo> models() const;
  RemoteModelInfo model_info() const;  // the address's model (Error when the server has no such index)

  // POST /v1/capture, streamed: `progress(layer, layers)` as the server reaches each layer; `cancel` is
  // polled at least every 100 ms and drops the connection (the server then stops the capture). Throws
  // Cancelled when cancelled.
  RemoteCapture capture(remote::CaptureRequest request, const std::atomic<bool>* cancel = nullptr,
                        const std::function<void(int64_t, int64_t)>& progress = {}) const;
  // POST /v1/tile: a tile of the last trace this client captured with the model.
  AttentionTile tile(const remote::TileRequest& request) const;
  // GET /v1/tokenizer/N: the model's SentencePiece file, written as DIR/tokenizer.model under
  // `cache_root` (DIR is returned; "" when the server's model has none).
  std::string fetch_tokenizer(const std::string& cache_root) const;
  // POST /v1/needle: one episode of the needle lab, run on the server.
  NeedleRun needle(const remote::NeedleRequest& request) const;

 private:
  // A request's reply body; Error for transport failures and refusals (the server's message).
  std::string post(const std::string& path, const std::string& body) const;
  RemoteAddress address_;
  std::string client_id_;
  int timeout_s_ = 600;
};

}  // namespace difflens::app
