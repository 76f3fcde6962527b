// `difflens serve`: the models of a GPU machine answering the desktop app (or curl) over HTTP. The protocol
// is core/formats/remote.h (requests) and core/formats/trace_io.h's trace_to_bytes (replies); the endpoints
// are described in core/FORMATS.md, "Remote protocol". Transport: cpp-httplib (Debian's libcpp-httplib-dev),
// plain HTTP/1.1, so an SSH tunnel or curl reaches it as it is. One thread runs every model request, in
// arrival order (a GPU runs one capture at a time anyway); the HTTP threads parse, check and wait. A client
// that names itself (X-DiffLens-Client) gets the app's latest-wins rule: its newer capture or needle request
// cancels the older one, queued or running.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/formats/remote.h"
#include "core/model/model.h"

namespace difflens::app {

struct ServeOptions {
  std::string host = "127.0.0.1";  // where to listen: loopback unless told otherwise
  int port = 8765;                 // 0: any free port (tests)
  std::string token;               // required on every request; empty: a random one is made
  remote::Limits limits;
  int max_connections = 256;  // connections served at once (each its own thread); one more gets a 503 at once
  int header_timeout_s = 5;   // a request's line and headers (until it is authenticated) must arrive in this
  bool log = true;            // one line per request on stderr
  int threads = 0;            // intra-op threads of the model thread (0: every core)
  int read_timeout_s = 30;    // after the headers: a body read that waits this long drops the client
};

struct ServeCounters {
  uint64_t served = 0, refused = 0, cancelled = 0;
  uint64_t busy_connections = 0;  // connections refused with a 503 past max_connections
  uint64_t slow_clients = 0;      // connections dropped for missing the header deadline (or sending nothing)
};

class RemoteServer {
 public:
  // The server owns the models; `paths` names them in GET /v1/info (one per model).
  RemoteServer(std::vector<Model> models, std::vector<std::string> paths, ServeOptions options);
  ~RemoteServer();  // stops, cancels what runs, joins
  RemoteServer(const RemoteServer&) = delete;
  RemoteServer& operator=(const RemoteServer&) = delete;

  // Binds and starts answering on its own threads; returns the port. Throws Error when it cannot bind.
  int start();
  void stop();
  const std::string& token() const;
  int port() const;
  // What the desktop app is given to reach model `index`: remote://HOST:PORT/INDEX
  std::string url(int index) const;
  ServeCounters counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A token of 32 hex digits from the system's random source.
std::string random_token();

}  // namespace difflens::app
