// `difflens serve`: load models once and answer the desktop app (remote://) and other tools over HTTP.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

#include "app/cli/commands.h"
#include "app/cli/common_options.h"
#include "app/cli/options.h"
#include "app/cli/run_support.h"
#include "app/common/model_line.h"
#include "app/remote/client.h"
#include "app/remote/server.h"
#include "app/worker/inference_worker.h"
#include "core/formats/error.h"

namespace difflens::cli {
namespace {

// --device auto|cpu|cuda, or a list of devices the layers are spread over: cuda:0,cuda:1 (or cpu,cpu).
std::vector<Model> load_placed(const std::vector<std::string>& dirs, const std::string& device_text) {
  std::vector<std::string> list;
  std::stringstream ss(device_text);
  for (std::string d; std::getline(ss, d, ',');)
    if (!d.empty()) list.push_back(d);
  const bool spread =
      device_text.find(',') != std::string::npos || device_text.find(':') != std::string::npos;
  std::vector<Model> models;
  for (const std::string& d : dirs) {
    models.push_back(load_model(d, spread ? DeviceChoice::Cpu : parse_device(device_text)));
    if (spread) models.back().place_layers(list);  // refuses with the numbers when it cannot fit
  }
  return models;
}

Option placement_option(const std::string& help) {
  return text("device", "auto|cpu|cuda|cuda:0,cuda:1,...", help, "auto");
}

int cmd_serve(const Args& a) {
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  std::vector<Model> models = load_placed(dirs, a.get("device"));
  app::ServeOptions o;
  o.host = a.get("host");
  o.port = a.get_int("port");
  o.token = a.get("token");
  if (o.token.empty())
    if (const char* env = std::getenv("DIFFLENS_TOKEN")) o.token = env;
  if (!o.token.empty() && o.token.size() < 16)
    throw Error("--token: use at least 16 characters (or leave it out: serve makes a random one)");
  o.limits.max_tokens = a.get_int("max-tokens");
  o.limits.max_needle_tokens = o.limits.max_tokens;
  o.limits.max_reply_bytes = a.get_double("max-reply-mb") * 1048576.0;
  o.limits.max_active = a.get_int("max-active");
  o.max_connections = a.get_int("max-connections");
  o.header_timeout_s = a.get_int("header-timeout");
  o.log = !a.has("quiet");
  o.threads = a.get_int("threads", 0);
  std::vector<std::string> descriptions;
  for (const Model& m : models) descriptions.push_back(describe_model(m));
  app::RemoteServer server(std::move(models), dirs, o);
  const int port = server.start();
  std::printf("difflens serve: %zu model(s), listening on http://%s:%d%s\n", dirs.size(), o.host.c_str(),
              port, o.host == "127.0.0.1" || o.host == "localhost" ? " (this machine only)" : "");
  for (size_t i = 0; i < dirs.size(); ++i)
    std::printf("  %zu  %s: %s\n", i, dirs[i].c_str(), descriptions[i].c_str());
  std::printf("token: %s\n", server.token().c_str());
  std::string urls;
  for (size_t i = 0; i < dirs.size() && i < 2; ++i)
    urls += (i ? "," : "") + server.url(static_cast<int>(i)) + "?token=" + server.token();
  std::printf(
      "open them in the desktop app (from another machine, first: ssh -N -L %d:localhost:%d THIS-MACHINE):\n"
      "  difflens --models '%s'\n"
      "or ask with curl: curl -H 'Authorization: Bearer %s' http://%s:%d/v1/info\n"
      "Ctrl-C stops the server.\n",
      port, port, urls.c_str(), server.token().c_str(), o.host.c_str(), port);
  std::fflush(stdout);
  auto previous_int = std::signal(SIGINT, on_interrupt);
  auto previous_term = std::signal(SIGTERM, on_interrupt);
  const int seconds = a.get_int("exit-after");
  const auto t0 = std::chrono::steady_clock::now();
  while (!g_stop) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (seconds > 0 && std::chrono::steady_clock::now() - t0 > std::chrono::seconds(seconds)) break;
  }
  server.stop();
  std::signal(SIGINT, previous_int);
  std::signal(SIGTERM, previous_term);
  const app::ServeCounters c = server.counters();
  std::printf("difflens serve: stopped after %llu answered, %llu refused, %llu superseded request(s)\n",
              static_cast<unsigned long long>(c.served), static_cast<unsigned long long>(c.refused),
              static_cast<unsigned long long>(c.cancelled));
  return 0;
}

Command serve_command() {
  return {"serve",
          "answer the desktop app (remote://HOST:PORT/N) and other tools over HTTP with the models of this "
          "machine, e.g. a GPU server reached through an SSH tunnel",
          {models_option("the models to serve, numbered 0, 1, ... in this order"),
           placement_option(
               "where the models run; a list spreads each model's consecutive layers over those GPUs, "
               "planned from their free memory (cpu,cpu: the same path on the CPU)"),
           threads_option(),
           text("host", "ADDRESS", "where to listen (127.0.0.1: this machine only; 0.0.0.0: every network)",
                "127.0.0.1"),
           integer("port", "N", 0, 65535, "8765", "the port (0: any free one, printed)"),
           text("token", "TOKEN",
                "the token every request must carry (default: $DIFFLENS_TOKEN, else a random one, printed)"),
           integer("max-tokens", "N", 1, 1 << 22, "16384", "the longest prompt a request may send"),
           number("max-reply-mb", "MB", 1, 1 << 22, "4096", "the most array data one reply may carry"),
           integer("max-active", "N", 1, 1024, "8", "requests queued or running at once (more are refused)"),
           integer("max-connections", "N", 1, 65536, "256",
                   "connections served at once, each on its own thread (one more is answered 503 at once)"),
           integer("header-timeout", "S", 1, 600, "5",
                   "a request's line and headers must arrive within S seconds of its first byte"),
           integer("exit-after", "S", 0, 1e9, "0", "stop after S seconds (0: at Ctrl-C)"),
           flag("quiet", "no line per request on stderr")},
          "The API (endpoints, the token header, a curl example) is in core/FORMATS.md, \"Remote protocol\". "
          "The server writes no files.",
          cmd_serve};
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

// A bounded load test on loopback: a server with the models in this process, CLIENTS threads each sending
// REQUESTS captures of a TOKENS-token prompt (alternating the models), every reply read as the app reads it.
int cmd_serve_bench(const Args& a) {
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  std::vector<Model> models = load_placed(dirs, a.get("device"));
  const int64_t tokens = a.get_int("tokens");
  const int clients = a.get_int("clients"), requests = a.get_int("requests");
  // The prompt: ids cycling through the vocabulary of the smallest model (the same for every request).
  int64_t vocab = models[0].config().vocab_size;
  for (const Model& m : models) vocab = std::min(vocab, m.config().vocab_size);
  std::vector<int64_t> ids(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) ids[static_cast<size_t>(i)] = 3 + (i * 7919) % (vocab - 3);
  // The same captures in this process, for the overhead (median of 5 per model).
  std::vector<double> local;
  for (const Model& m : models) {
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      (void)m.capture(ids);
      t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    local.push_back(percentile(t, 0.5));
  }
  app::ServeOptions o;
  o.port = 0;
  o.log = false;
  o.limits.max_active = clients + 1;
  o.threads = a.get_int("threads", 0);
  const size_t n_models = models.size();
  o.header_timeout_s = a.get_int("header-timeout");
  app::RemoteServer server(std::move(models), dirs, o);
  const int port = server.start();
  // --stalled N: that many connections that send half a request and then nothing, held open through the
  // run, and the time a good request (GET /v1/info) then takes.
  const int stalled = a.get_int("stalled");
  std::vector<int> stalled_fds;
  for (int i = 0; i < stalled; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (fd >= 0) ::close(fd);
      throw Error("serve-bench: could not open stalled connection " + std::to_string(i + 1));
    }
    const std::string half = "POST /v1/capture HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    (void)::send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    stalled_fds.push_back(fd);
  }
  double info_ms = 0;
  if (stalled > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // let every stalled one be accepted
    app::RemoteAddress addr;
    addr.host = "127.0.0.1";
    addr.port = port;
    addr.token = server.token();
    const auto i0 = std::chrono::steady_clock::now();
    (void)app::RemoteClient(addr, "bench-info").model_info();
    info_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - i0).count();
  }
  std::vector<std::vector<double>> round_trip(static_cast<size_t>(clients)),
      server_ms(static_cast<size_t>(clients));
  std::vector<size_t> bytes(static_cast<size_t>(clients), 0);
  std::vector<std::string> errors(static_cast<size_t>(clients));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c)
    threads.emplace_back([&, c] {
      try {
        for (int r = 0; r < requests; ++r) {
          app::RemoteAddress addr;
          addr.host = "127.0.0.1";
          addr.port = port;
          addr.model = static_cast<int>((c + r) % static_cast<int>(n_models));
          addr.token = server.token();
          const app::RemoteClient client(addr, "bench-" + std::to_string(c));
          remote::CaptureRequest q;
          q.token_ids = ids;
          const app::RemoteCapture got = client.capture(q);
          round_trip[static_cast<size_t>(c)].push_back(got.round_trip_ms);
          server_ms[static_cast<size_t>(c)].push_back(got.server_ms);
          bytes[static_cast<size_t>(c)] += got.bytes;
        }
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(c)] = user_message(e);
      }
    });
  for (auto& t : threads) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const app::ServeCounters counters = server.counters();
  for (int fd : stalled_fds) ::close(fd);
  server.stop();
  for (const auto& e : errors)
    if (!e.empty()) throw Error("serve-bench: a client failed: " + e);
  std::vector<double> all_rt, all_server;
  size_t total_bytes = 0;
  for (int c = 0; c < clients; ++c) {
    all_rt.insert(all_rt.end(), round_trip[static_cast<size_t>(c)].begin(),
                  round_trip[static_cast<size_t>(c)].end());
    all_server.insert(all_server.end(), server_ms[static_cast<size_t>(c)].begin(),
                      server_ms[static_cast<size_t>(c)].end());
    total_bytes += bytes[static_cast<size_t>(c)];
  }
  std::printf(
      "serve-bench: %zu model(s), %lld-token captures (every map), %d client(s) x %d request(s), "
      "loopback, %d thread(s)\n",
      n_models, static_cast<long long>(tokens), clients, requests, num_threads());
  std::printf("  throughput   %.2f requests/s, %.1f MB/s of replies\n",
              static_cast<double>(all_rt.size()) / seconds,
              static_cast<double>(total_bytes) / 1048576.0 / seconds);
  std::printf("  round trip   p50 %.1f ms, p99 %.1f ms (request sent to trace read, queueing included)\n",
              percentile(all_rt, 0.5), percentile(all_rt, 0.99));
  std::printf("  server       p50 %.1f ms of capture per request\n", percentile(all_server, 0.5));
  if (stalled > 0)
    std::printf(
        "  stalled      %d connection(s) sending half a request and then nothing: GET /v1/info answered in "
        "%.1f ms beside them; %llu dropped at the %d s header deadline during the run\n",
        stalled, info_ms, static_cast<unsigned long long>(counters.slow_clients), o.header_timeout_s);
  for (size_t m = 0; m < local.size(); ++m)
    std::printf("  in process   model %zu: %.1f ms per capture (median of 5, no server)\n", m, local[m]);
  std::printf(
      "  reply        %.1f MB per request\n",
      static_cast<double>(total_bytes) / 1048576.0 / static_cast<double>(std::max<size_t>(1, all_rt.size())));
  return 0;
}

Command serve_bench_command() {
  return {
      "serve-bench",
      "a bounded load test of serve on loopback: requests/s and p50/p99 latency of captures of the models "
      "(default: the bundled pair)",
      {models_option("the models served"), placement_option("where the models run (as serve's --device)"),
       threads_option(), integer("tokens", "N", 1, 16384, "256", "prompt length"),
       integer("clients", "N", 1, 16, "2", "clients sending at once"),
       integer("requests", "N", 1, 1000, "20", "captures per client"),
       integer("stalled", "N", 0, 1024, "0",
               "connections that send half a request and hold it open through the run (stalled clients)"),
       integer("header-timeout", "S", 1, 600, "5", "the server's header deadline (as serve's)")},
      "Loopback only: the server runs in this process on a free port of 127.0.0.1.",
      cmd_serve_bench};
}

}  // namespace

std::vector<Command> serve_commands() {
  return {serve_command(), serve_bench_command()};
}

}  // namespace difflens::cli
