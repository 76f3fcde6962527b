// difflens soak: the app driven through a long, messy session. It writes a seeded script of random actions
// (app/desktop/play_script.h's soak_script) over good and broken inputs it prepares (corrupt checkpoints, the
// fuzz corpora's configs and checkpoints, corrupt bundles, a 100K-character paste, a `difflens serve` it
// kills and restarts), plays it in the app (a child process: this executable, so a sanitizer build checks
// itself), and fails on a crash, a sanitizer report, an app that no longer answers, or resident memory that
// grows past a bound after the first thousand actions. docs/play.md gives the figures.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>
#include <utility>

#include "app/cli/commands.h"
#include "app/cli/common_options.h"
#include "app/cli/options.h"
#include "app/cli/paths.h"
#include "app/desktop/play_script.h"
#include "core/formats/atomic_file.h"
#include "core/formats/error.h"

extern char** environ;

namespace difflens::cli {
namespace {

namespace fs = std::filesystem;

// This executable, started with `args`, its stdout and stderr into `log`. Returns its pid.
pid_t spawn_self(const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv{"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> raw;
  for (std::string& a : argv) raw.push_back(a.data());
  raw.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  pid_t pid = 0;
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) throw Error("soak: cannot find this executable (/proc/self/exe)");
  self[n] = 0;
  const int err = posix_spawn(&pid, self, &files, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (err != 0) throw Error(std::string("soak: cannot start ") + self + ": " + std::strerror(err));
  return pid;
}

// A TCP port nothing listens on now (the kernel's pick).
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (s >= 0) ::close(s);
  if (port == 0) throw Error("soak: no free port on 127.0.0.1 for the server");
  return port;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary);
  out << bytes;
  if (!out) throw Error("soak: cannot write " + p.string());
}

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A model folder from `config` and `weights` (bytes), the tokenizer of `like` beside them.
std::string broken_model(const fs::path& dir, const std::string& config, const std::string& weights,
                         const fs::path& like) {
  fs::create_directories(dir);
  write_bytes(dir / "config.json", config);
  write_bytes(dir / "model.safetensors", weights);
  if (fs::exists(like / "tokenizer.model")) fs::copy_file(like / "tokenizer.model", dir / "tokenizer.model");
  return dir.string();
}

// The inputs the script draws from, made under `dir`: the models as given, broken models (truncated and
// bit-flipped weights, a config that is not JSON, an empty folder, a file, a missing path, and each config
// and checkpoint of `corpus`), a good bundle and three broken ones, the paste.
app::SoakInputs prepare(const fs::path& dir, const std::vector<std::string>& models,
                        const std::string& corpus, const std::string& haystack, const fs::path& log) {
  app::SoakInputs in;
  in.models = models;
  const fs::path left = models[0];
  const std::string config = read_bytes(left / "config.json"),
                    weights = read_bytes(left / "model.safetensors");
  const fs::path bad = dir / "bad";
  in.bad.push_back(broken_model(bad / "truncated", config, weights.substr(0, weights.size() / 2), left));
  std::string flipped = weights;
  for (size_t i = 0; i < 64 && i < flipped.size(); ++i) flipped[i * 7 % flipped.size()] ^= 0x5a;
  in.bad.push_back(broken_model(bad / "flipped-header", config, flipped, left));
  in.bad.push_back(
      broken_model(bad / "config-not-json", "{\"hidden_size\": 64, \"layers\": [", weights, left));
  fs::create_directories(bad / "empty");
  in.bad.push_back((bad / "empty").string());
  write_bytes(bad / "a-file", "not a folder");
  in.bad.push_back((bad / "a-file").string());
  in.bad.push_back((bad / "missing").string());
  if (!corpus.empty()) {
    int k = 0;
    for (const char* kind : {"config", "checkpoint", "safetensors"}) {
      const fs::path from = fs::path(corpus) / kind;
      if (!fs::is_directory(from)) continue;
      for (const auto& f : fs::directory_iterator(from)) {
        const std::string bytes = read_bytes(f.path());
        const fs::path to = bad / ("corpus-" + std::to_string(k++));
        in.bad.push_back(std::string(kind) == "config" ? broken_model(to, bytes, weights, left)
                                                       : broken_model(to, config, bytes, left));
      }
    }
  }
  // A good bundle from the left model, then three broken copies of it.
  const fs::path good = dir / "bundle-good";
  const pid_t pid =
      spawn_self({"capture", "--model", left.string(), "--prompt",
                  "The secret code of Mira is 4821. What is the code of Mira?", "--out", good.string()},
                 log);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error("soak: the capture of the good bundle failed (" + log.string() + ")");
  in.bundles.push_back(good.string());
  for (const char* name : {"bundle-cut-json", "bundle-cut-maps", "bundle-empty-json"}) {
    const fs::path b = dir / name;
    fs::copy(good, b, fs::copy_options::recursive);
    for (const auto& f : fs::directory_iterator(b)) {
      const std::string bytes = read_bytes(f.path());
      const std::string file = f.path().filename().string();
      if (std::string(name) == "bundle-cut-json" && file == "trace.json")
        write_bytes(f.path(), bytes.substr(0, bytes.size() / 2));
      else if (std::string(name) == "bundle-cut-maps" && file != "trace.json")
        write_bytes(f.path(), bytes.substr(0, bytes.size() / 3));
      else if (std::string(name) == "bundle-empty-json" && file == "trace.json")
        write_bytes(f.path(), "{}");
    }
    in.bundles.push_back(b.string());
  }
  // 100K characters of the haystack with invalid bytes and control characters through it.
  std::string hay = read_bytes(haystack), paste;
  if (hay.empty()) hay = "The river was high that spring. ";
  while (paste.size() < 100000) paste += hay.substr(0, std::min<size_t>(hay.size(), 100000 - paste.size()));
  for (size_t i = 997; i < paste.size(); i += 9973) paste[i] = static_cast<char>(i % 2 ? 0xff : 0x01);
  in.paste_file = (dir / "paste-100k.txt").string();
  write_bytes(in.paste_file, paste);
  in.export_dir = (dir / "exports").string();
  return in;
}

// What LeakSanitizer prints when it cannot do its check (the tool's failure, not a leak).
constexpr const char* kLsanFatal = "LeakSanitizer has encountered a fatal error";

// The remote slot's server while the app plays: started, then killed (SIGKILL: as a crash or a pulled cable)
// and started again every 20 s (15 s up, 5 s down), until stopped.
class ChaosServer {
 public:
  ChaosServer(std::vector<std::string> args, fs::path log) : args_(std::move(args)), log_(std::move(log)) {
    start();
    thread_ = std::thread([this] {
      using namespace std::chrono_literals;
      for (int tick = 1; !stop_; ++tick) {
        std::this_thread::sleep_for(100ms);
        if (tick % 200 == 150 && server_ > 0) {
          ::kill(server_, SIGKILL);
          ::waitpid(server_, nullptr, 0);
          server_ = 0;
        } else if (tick % 200 == 0 && server_ == 0) {
          start();
          ++restarts_;
        }
      }
    });
  }
  ~ChaosServer() { stop(); }
  void stop() {
    if (stop_.exchange(true)) return;
    thread_.join();
    if (server_ > 0) {
      ::kill(server_, SIGKILL);
      ::waitpid(server_, nullptr, 0);
    }
  }
  int restarts() const { return restarts_; }

 private:
  void start() { server_ = spawn_self(args_, log_); }
  std::vector<std::string> args_;
  fs::path log_;
  std::atomic<bool> stop_{false};
  std::atomic<int> restarts_{0};
  std::atomic<pid_t> server_{0};
  std::thread thread_;
};

// One play of the script by the app, ended by itself or killed past `limit` seconds.
struct AppRun {
  int status = 0;
  bool hung = false;
  double took = 0;  // seconds
};

AppRun play_app(const std::vector<std::string>& args, const fs::path& log, double limit) {
  AppRun run;
  const auto began = std::chrono::steady_clock::now();
  const pid_t app = spawn_self(args, log);
  while (::waitpid(app, &run.status, WNOHANG) == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count() > limit) {
      run.hung = true;
      ::kill(app, SIGKILL);
      ::waitpid(app, &run.status, 0);
    }
  }
  run.took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  return run;
}

// What a play's log and exit show wrong (empty: nothing); with `print`, its figures on stdout.
std::vector<std::string> assess_run(const std::string& text, const AppRun& run, double limit, double bound,
                                    int restarts, bool print) {
  std::vector<std::string> problems;
  if (run.hung)
    problems.push_back("the app did not end within " + std::to_string(static_cast<int>(limit)) + " s");
  if (WIFSIGNALED(run.status))
    problems.push_back("the app died of signal " + std::to_string(WTERMSIG(run.status)));
  if (WIFEXITED(run.status) && WEXITSTATUS(run.status) != 0)
    problems.push_back("the app exited with status " + std::to_string(WEXITSTATUS(run.status)));
  for (const char* report : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", kLsanFatal, "runtime error:"})
    if (text.find(report) != std::string::npos)
      problems.push_back(std::string("the log has '") + report + "'");
  std::smatch m;
  const std::regex done(
      "play: (done|stopped at the time limit): ([0-9]+) of [0-9]+ actions.*?in ([0-9.]+) s; resident memory "
      "([0-9]+) MB after action ([0-9]+), ([0-9]+) MB at the end \\(grew (-?[0-9]+) MB\\), peak ([0-9]+) MB; "
      "([0-9]+) screenshots? not written, [0-9]+ with layout faults, ([0-9]+) waits? for results");
  const size_t line = text.rfind("play: done");
  const size_t line2 = text.rfind("play: stopped");
  const size_t at = line != std::string::npos ? line : line2;
  const std::string summary = at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
  if (!std::regex_search(summary, m, done)) {
    problems.push_back("the app never said it finished the script (no 'play: done' with its figures)");
    return problems;
  }
  if (std::stoi(m[10]) > 0)
    problems.push_back(m[10].str() + " waits for results never ended: the app stopped answering");
  if (std::stod(m[7]) > bound)
    problems.push_back("resident memory grew " + m[7].str() + " MB after action " + m[5].str() + " (bound " +
                       std::to_string(static_cast<int>(bound)) + " MB): a leak");
  if (print)
    std::printf(
        "soak: %s actions in %.0f s (the whole run %.0f s), the server killed and restarted %d times;\n"
        "soak: resident memory %s MB after action %s, %s MB at the end (grew %s MB; bound %.0f MB), peak %s "
        "MB; %s screenshots not written\n",
        m[2].str().c_str(), std::stod(m[3]), run.took, restarts, m[4].str().c_str(), m[5].str().c_str(),
        m[6].str().c_str(), m[7].str().c_str(), bound, m[8].str().c_str(), m[9].str().c_str());
  return problems;
}

// The trend of a log's resident memory, every thousand actions (MB, comma-separated; "" : none).
std::string memory_trend(const std::string& text) {
  std::string trend;
  for (size_t at = text.find("play: resident memory "); at != std::string::npos;
       at = text.find("play: resident memory ", at + 1)) {
    const size_t from = at + std::strlen("play: resident memory ");
    trend += (trend.empty() ? "" : ", ") + text.substr(from, text.find(" MB", from) - from);
  }
  return trend;
}

int cmd_soak(const Args& a) {
#ifndef DIFFLENS_GUI
  throw Error("soak plays the desktop app, and this difflens was built without it (DIFFLENS_GUI=OFF)");
#endif
  const fs::path out = a.get("out");
  check_output_dir(out.string(), "--out");
  const char* display = std::getenv("DISPLAY");
  if (!display || !*display)
    throw Error("soak needs a display for the app: run it under xvfb-run (scripts/soak does)");
  if (fs::exists(out) && !fs::is_empty(out))
    throw Error("soak: --out " + out.string() + " is not empty (a soak never writes over anything)");
  fs::create_directories(out);
  const std::vector<std::string> models = model_dirs(a, 2, "LEFT_DIR,RIGHT_DIR");
  const uint64_t seed = static_cast<uint64_t>(a.get_int("seed"));
  const int actions = a.get_int("actions");
  const double seconds = a.get_double("seconds"), bound = a.get_double("rss-bound");
  const fs::path log = out / "soak.log", app_log = out / "app.log";

  app::SoakInputs in = prepare(out / "inputs", models, a.get("corpus"), bundled_asset("haystack.txt"), log);
  const int port = free_port();
  const std::string token = "soak-" + std::to_string(seed);
  in.remotes = {"remote://127.0.0.1:" + std::to_string(port) + "/0?token=" + token};
  const fs::path script = out / "soak.play";
  write_file_atomically(script.string(), app::soak_script(seed, actions, in));
  ChaosServer server({"serve", "--models", models[0], "--port", std::to_string(port), "--token", token,
                      "--threads", "1", "--quiet"},
                     out / "serve.log");

  std::printf("soak: seed %llu, %d actions%s, the script in %s, the app's log in %s\n",
              static_cast<unsigned long long>(seed), actions,
              seconds > 0 ? (" for at most " + std::to_string(static_cast<int>(seconds)) + " s").c_str() : "",
              script.c_str(), app_log.c_str());
  std::fflush(stdout);
  std::vector<std::string> app_args{"--models",
                                    models[0] + "," + models[1],
                                    "--play",
                                    script.string(),
                                    "--play-exit",
                                    "--size",
                                    "1280x800",
                                    "--threads",
                                    "1",
                                    "--haystack",
                                    bundled_asset("haystack.txt")};
  if (seconds > 0) app_args.insert(app_args.end(), {"--play-seconds", std::to_string(seconds)});
  // Under AddressSanitizer, freed memory waits in a quarantine (256 MB by default) before it is reused: the
  // app's resident memory would grow by that much whatever it does. A small one keeps the growth the app's
  // own.
  const char* asan = std::getenv("ASAN_OPTIONS");
  const std::string asan_options =
      std::string(asan ? asan : "") + (asan && *asan ? ":" : "") + "quarantine_size_mb=16";
  setenv("ASAN_OPTIONS", asan_options.c_str(), 1);
  // The app must end by itself: its actions, then at most 10 minutes for the last wait and the exit.
  const double limit = (seconds > 0 ? seconds : 3600.0) + 600;
  fs::path played_log = app_log;
  AppRun run = play_app(app_args, played_log, limit);
  // LeakSanitizer's own failure ends the app with status 1 and no report (app::leak_check_could_not_run): the
  // tool could not look, so the script is played once more, said here. Only when nothing else went wrong in
  // that run (no hung wait, no memory growth, the script finished): anything else fails at once.
  {
    const std::string first = read_bytes(app_log);
    const std::vector<std::string> found = assess_run(first, run, limit, bound, server.restarts(), false);
    const bool only_the_tool = std::all_of(found.begin(), found.end(), [](const std::string& p) {
      return p == "the app exited with status 1" || p == std::string("the log has '") + kLsanFatal + "'";
    });
    if (app::leak_check_could_not_run(first) && only_the_tool) {
      const double first_took = run.took;
      played_log = out / "app-2.log";
      std::printf(
          "soak: LeakSanitizer itself failed in the app's leak check ('%s', no leak reported; %s): the script "
          "is played again, the app's log in %s\n",
          kLsanFatal, app_log.c_str(), played_log.c_str());
      std::fflush(stdout);
      run = play_app(app_args, played_log, limit);
      run.took += first_took;  // the whole run: both plays (the server's restarts count both too)
    }
  }
  server.stop();

  const std::string text = read_bytes(played_log);
  const std::vector<std::string> problems = assess_run(text, run, limit, bound, server.restarts(), true);
  // What is on screen then counts too: a 100K-character paste's trace is larger than a short prompt's.
  const std::string trend = memory_trend(text);
  if (!trend.empty()) std::printf("soak: resident memory every 1000 actions (MB): %s\n", trend.c_str());
  if (problems.empty()) {
    std::printf("soak: passed: no crash, no sanitizer report, the app answered at the end\n");
    return 0;
  }
  for (const std::string& p : problems) std::printf("soak: FAILED: %s\n", p.c_str());
  std::printf("soak: the app's last lines (%s):\n", played_log.c_str());
  const size_t tail = text.size() > 4000 ? text.size() - 4000 : 0;
  std::fwrite(text.data() + tail, 1, text.size() - tail, stdout);
  return 1;
}

}  // namespace

std::vector<Command> soak_commands() {
  return {
      {"soak",
       "play thousands of random app actions over good and broken inputs; fail on a crash, a sanitizer "
       "report, no answer, or a leak",
       {required(text("out", "DIR", "an empty folder for the inputs, the script and the logs")),
        text("models", "LEFT_DIR,RIGHT_DIR", "the pair the app starts with (default: the bundled pair)"),
        integer("seed", "N", 0, 1e9, "1", "the script's seed (the same seed plays the same script)"),
        integer("actions", "N", 10, 10000000, "1200", "random actions in the script"),
        number("seconds", "S", 0, 86400, "0", "stop playing after S seconds (0: the whole script)"),
        number("rss-bound", "MB", 1, 1e6, "200",
               "the most resident memory may grow after the first thousand actions (a quarter of a shorter "
               "script)"),
        text("corpus", "DIR",
             "the fuzz corpora (tests/data/fuzz): each config and checkpoint becomes a broken model")},
       "Needs a display (xvfb-run). scripts/soak runs it for ten minutes in the sanitizer build.",
       cmd_soak}};
}

}  // namespace difflens::cli
