// `difflens serve`: load models once and answer the desktop app (remote://) and other tools over HTTP.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "app/cli_common.h"
#include "app/inference_worker.h"
#include "app/remote_server.h"
#include "core/error.h"

namespace difflens::cli {
namespace {

int cmd_serve(const Args& a) {
  apply_threads(a);
  const std::vector<std::string> dirs = model_dirs(a);
  std::vector<Model> models;
  for (const std::string& d : dirs) models.push_back(load_model(d, device(a)));
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
  o.log = !a.has("quiet");
  std::vector<std::string> descriptions;
  for (const Model& m : models) descriptions.push_back(app::describe_model(m));
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
          {models_option("the models to serve (default: the bundled pair), numbered 0, 1, ... in this order"),
           device_option("auto"), threads_option(),
           text("host", "ADDRESS", "where to listen (127.0.0.1: this machine only; 0.0.0.0: every network)",
                "127.0.0.1"),
           integer("port", "N", 0, 65535, "8765", "the port (0: any free one, printed)"),
           text("token", "TOKEN",
                "the token every request must carry (default: $DIFFLENS_TOKEN, else a random one, printed)"),
           integer("max-tokens", "N", 1, 1 << 22, "16384", "the longest prompt a request may send"),
           number("max-reply-mb", "MB", 1, 1 << 22, "4096", "the most array data one reply may carry"),
           integer("max-active", "N", 1, 1024, "8", "requests queued or running at once (more are refused)"),
           integer("exit-after", "S", 0, 1e9, "0", "stop after S seconds (0: at Ctrl-C)"),
           flag("quiet", "no line per request on stderr")},
          "The API (endpoints, the token header, a curl example) is in core/FORMATS.md, \"Remote protocol\". "
          "The server writes no files.",
          cmd_serve};
}

}  // namespace

std::vector<Command> serve_commands() {
  return {serve_command()};
}

}  // namespace difflens::cli
