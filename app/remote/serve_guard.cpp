// The guarded transport of `difflens serve` (see serve_guard.h).
#include "app/remote/serve_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "core/formats/remote.h"

namespace difflens::app {
namespace {

using Clock = std::chrono::steady_clock;

// Whether `s` becomes ready for `events` within `timeout_ms` (0: only if it is now).
bool wait_for(socket_t s, short events, int timeout_ms) {
  pollfd p{s, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, std::max(0, timeout_ms));
  } while (r < 0 && errno == EINTR);
  return r > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
}

void address_of(socket_t s, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t n = sizeof a;
  const int r = peer ? ::getpeername(s, reinterpret_cast<sockaddr*>(&a), &n)
                     : ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &n);
  ip.clear();
  port = 0;
  if (r != 0) return;
  char text[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
  }
  ip = text;
}

// A connection's stream: reads under the header deadline until the pre-routing handler says the headers are
// in, then under the read timeout; buffered (httplib reads request lines a byte at a time).
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(socket_t s, const GuardLimits& limits) : sock_(s), limits_(limits) {}

  // A new request's first byte has arrived: its headers are due within the header timeout.
  void begin_request() {
    headers_done_ = false;
    timed_out_ = false;
    close_after_reply_ = false;
    deadline_ = Clock::now() + std::chrono::milliseconds(limits_.header_timeout_ms);
  }
  void mark_headers_done() { headers_done_ = true; }
  void mark_close_after_reply() { close_after_reply_ = true; }
  bool close_after_reply() const { return close_after_reply_; }
  bool timed_out() const { return timed_out_; }
  bool accepted() const { return headers_done_; }
  bool buffered() const { return pos_ < len_; }

  bool is_readable() const override { return buffered() || wait_for(sock_, POLLIN, read_wait_ms()); }
  bool is_writable() const override { return wait_for(sock_, POLLOUT, limits_.write_timeout_ms); }
  ssize_t read(char* ptr, size_t size) override {
    if (!buffered()) {
      const int wait = read_wait_ms();
      if (!wait_for(sock_, POLLIN, wait)) {
        if (!headers_done_) timed_out_ = true;
        return -1;
      }
      ssize_t n;
      do {
        n = ::recv(sock_, buf_, sizeof buf_, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) return n < 0 ? -1 : 0;
      pos_ = 0;
      len_ = static_cast<size_t>(n);
    }
    const size_t k = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, k);
    pos_ += k;
    return static_cast<ssize_t>(k);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do {
      n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(sock_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(sock_, false, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  int read_wait_ms() const {
    if (headers_done_) return limits_.read_timeout_ms;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    return static_cast<int>(std::max<int64_t>(0, left));
  }

  socket_t sock_;
  const GuardLimits& limits_;
  Clock::time_point deadline_;
  bool headers_done_ = false, timed_out_ = false, close_after_reply_ = false;
  char buf_[4096];
  size_t pos_ = 0, len_ = 0;
};

thread_local DeadlineStream* t_stream = nullptr;  // the connection this thread serves

// A thread per connection, started at once; finished threads are joined as new connections come, the rest
// when the server stops (after their sockets are shut down, so none waits out a timeout).
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(std::function<void()> wake_all) : wake_all_(std::move(wake_all)) {}
  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (*it->done) {
        it->thread.join();
        it = workers_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    workers_.push_back({std::thread([fn = std::move(fn), done] {
                          fn();
                          *done = true;
                        }),
                        done});
  }
  void shutdown() override {
    wake_all_();
    std::lock_guard<std::mutex> lock(mutex_);
    for (Worker& w : workers_) w.thread.join();
    workers_.clear();
  }

 private:
  struct Worker {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::function<void()> wake_all_;
  std::mutex mutex_;
  std::list<Worker> workers_;
};

}  // namespace

struct GuardedServer::Live {
  std::mutex mutex;
  std::set<socket_t> sockets;
  void shut_all() {
    std::lock_guard<std::mutex> lock(mutex);
    for (socket_t s : sockets) ::shutdown(s, SHUT_RDWR);
  }
};

GuardedServer::GuardedServer(GuardLimits limits) : limits_(limits), live_(std::make_unique<Live>()) {
  new_task_queue = [this] { return new ConnectionThreads([this] { live_->shut_all(); }); };
}

GuardedServer::~GuardedServer() = default;

void GuardedServer::widen_backlog() {
  const socket_t s = svr_sock_;
  if (s != INVALID_SOCKET)
    ::listen(s, std::max(16, limits_.max_connections));  // Linux: sets the backlog anew
}

void GuardedServer::close_after_reply() {
  if (t_stream) t_stream->mark_close_after_reply();
}

void GuardedServer::headers_done() {
  if (t_stream) t_stream->mark_headers_done();
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  Live& live = *live_;
  {
    std::lock_guard<std::mutex> lock(live.mutex);
    live.sockets.insert(sock);
  }
  const int open = ++counters_.open;
  auto finish = [&] {
    {
      std::lock_guard<std::mutex> lock(live.mutex);
      live.sockets.erase(sock);
    }
    --counters_.open;
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  };
  if (open > limits_.max_connections) {  // one too many: say so at once and read nothing
    ++counters_.busy;
    const std::string body =
        remote::error_json(503, "busy: " + std::to_string(limits_.max_connections) +
                                    " connections are open (this server's --max-connections); try again");
    const std::string reply =
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
    ::send(sock, reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    finish();
    return true;
  }
  DeadlineStream strm(sock, limits_);
  t_stream = &strm;
  for (int left = limits_.keep_alive_max; left > 0; --left) {
    // The first request's first byte is due within the header deadline; later ones within the keep-alive
    // idle time.
    const bool first = left == limits_.keep_alive_max;
    if (!strm.buffered() &&
        !wait_for(sock, POLLIN, first ? limits_.header_timeout_ms : limits_.keep_alive_timeout_ms)) {
      if (first) ++counters_.slow;  // connected and sent nothing
      break;
    }
    strm.begin_request();
    bool closed = false;
    const bool ok = process_request(strm, left == 1, closed, nullptr);
    if (strm.timed_out()) {
      ++counters_.slow;
      break;
    }
    // Refused before its body was read (no token), or with its body read only in part (over the limit, a
    // multipart form it cannot parse): what follows on the connection is the unread rest of that body.
    if (!ok || closed || !strm.accepted() || strm.close_after_reply()) break;
  }
  t_stream = nullptr;
  finish();
  return true;
}

}  // namespace difflens::app
