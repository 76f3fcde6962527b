// The transport of `difflens serve` under stalled and abusive clients: cpp-httplib's server with its
// connection handling replaced so that no client can hold the others out.
// - Each connection gets its own thread at once (a stalled client waits in its own thread, not in front of
//   the others in a small pool); at most `max_connections` are served at once, and one past that gets an
//   immediate 503 written to it, without reading anything.
// - A request must deliver its request line and headers within `header_timeout_ms` of its first byte
//   (however slowly it dribbles them); the server's pre-routing handler, once it accepts the request
//   (authentication), ends that phase and the body reads under the ordinary read timeout. A request it does
//   not accept is answered and its connection closed (its body, if any, is never read).
// - Keep-alive is bounded: at most `keep_alive_max` requests per connection, `keep_alive_timeout_ms` idle
//   between them.
// Threads: the listener thread accepts; each connection's thread runs httplib's request processing.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <memory>

namespace difflens::app {

struct GuardLimits {
  int max_connections = 256;         // connections served at once; one more gets a 503 and is closed
  int header_timeout_ms = 5000;      // request line and headers must arrive within this
  int read_timeout_ms = 30000;       // a body read (after the headers) that waits longer than this fails
  int write_timeout_ms = 60000;      // a reply the client does not take for this long is dropped
  int keep_alive_max = 100;          // requests per connection
  int keep_alive_timeout_ms = 5000;  // idle time allowed between two requests of a connection
};

struct GuardCounters {
  std::atomic<uint64_t> busy{0};  // connections refused with a 503 past max_connections
  std::atomic<uint64_t> slow{0};  // requests dropped for missing the header deadline
  std::atomic<int> open{0};       // connections being served now
};

class GuardedServer : public httplib::Server {
 public:
  explicit GuardedServer(GuardLimits limits);
  ~GuardedServer() override;
  const GuardLimits& limits() const { return limits_; }
  const GuardCounters& counters() const { return counters_; }
  // Called by the pre-routing handler once a request's headers are in (and accepted): its body, if any,
  // then reads under the read timeout instead of the header deadline.
  static void headers_done();
  // Called by a handler that leaves part of its request's body unread (refused over the limit, or a body it
  // cannot parse): the connection closes after the reply, since the rest is no next request.
  static void close_after_reply();
  // After bind_to_port: a listen backlog of max_connections (cpp-httplib listens with 5, so a burst of
  // connections beyond it waits out TCP's SYN retries, a second and more each).
  void widen_backlog();

 private:
  bool process_and_close_socket(socket_t sock) override;

  GuardLimits limits_;
  GuardCounters counters_;
  struct Live;  // the sockets being served, so that stopping ends them at once
  std::unique_ptr<Live> live_;
};

}  // namespace difflens::app
