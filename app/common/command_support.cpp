// What several difflens commands share (see command_support.h).
#include "app/common/command_support.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "core/formats/bounded_read.h"
#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "core/formats/model_dir.h"
#include "core/formats/tokenizer.h"

namespace difflens::cli {

Option threads_option() {
  return integer("threads", "N", 1, 4096, "",
                 "CPU threads (default: every core, " + std::to_string(default_threads()) + " here)");
}

Option device_option(const std::string& fallback) {
  return choice("device", "auto|cpu|cuda", fallback,
                "where the models run (auto: CUDA when this LibTorch build has a GPU)");
}

Option models_option(const std::string& help) {
  return text("models", "DIR1,DIR2", help + " (default: the bundled diff-small,baseline-small)");
}

Option prompt_option() {
  return text("prompt", "TEXT", "the prompt");
}

Option prompt_file_option() {
  return text("prompt-file", "F", "the prompt read from a file (any bytes)");
}

Option specials_option() {
  return choice(
      "specials", "match|text", "match",
      "special tokens written in the prompt (<|endoftext|>, <|eot_id|>): matched as their ids, or read "
      "as the text they are (a document about tokenizers; no forged document boundary)");
}

Option answer_option() {
  return int_list(
      "answer", "BEGIN,END", 0, 1e9, 2, 2,
      "the answer's tokens, marked: [BEGIN, END), END excluded (10,13 marks tokens 10, 11 and 12)");
}

Option intervene_option() {
  return repeatable(text("intervene", "SPEC",
                         "run the model changed: lambda[:L[:H]]=V|init, ablate:L:H[=mean], "
                         "knockout[:L[:H]]=not-answer|only-answer|not-noise|drop:B-E|keep:B-E[@ROWS] "
                         "(core/FORMATS.md, Interventions)"));
}

Option query_option() {
  return integer("query", "I", 0, 1e9, "", "the query token (default: the last); knockouts start there");
}

Interventions interventions_of(const Args& a, const ModelConfig& config, int64_t tokens) {
  const std::vector<std::string> specs = a.get_all("intervene");
  if (specs.empty()) return {};
  PromptMarks marks;
  if (a.takes("answer") && a.has("answer")) {
    const std::vector<int> answer = a.get_int_list("answer");
    marks.answer = {answer[0], answer[1]};
  }
  marks.query = a.takes("query") && a.has("query") ? a.get_int("query") : tokens - 1;
  if (marks.query >= tokens)
    throw Error("--query " + std::to_string(marks.query) + " is beyond the " + std::to_string(tokens) +
                "-token prompt");
  return resolve_interventions(specs, config, marks, tokens);
}

std::string interventions_line(const std::vector<std::pair<std::string, std::string>>& applied) {
  std::string line;
  for (const auto& [spec, as_run] : applied)
    line += (line.empty() ? "" : "; ") + spec + (spec == as_run ? "" : " (as run: " + as_run + ")");
  return line.empty() ? "" : "interventions  " + line;
}

Option pooled_budget_option(const std::string& fallback) {
  return number("pooled-budget", "MB", 0, 1e6, fallback,
                "long prompts: pooled maps (mean/max) within MB per model once exact maps would not fit "
                "(0: always exact); rows and tiles are recomputed exactly");
}

Option haystack_option() {
  return text(
      "haystack", "FILE",
      "haystack text for needle episodes (default: the bundled haystack.txt, share/difflens/ when installed)");
}

std::vector<Option> pair_shape_options() {
  const PairSpec d;
  return {integer("hidden", "E", 8, 65536, std::to_string(d.hidden_size), "hidden size"),
          integer("layers", "N", 1, 1024, std::to_string(d.num_layers), "layers"),
          integer("heads", "H", 1, 1024, std::to_string(d.diff_heads), "DIFF heads (the baseline gets 2H)"),
          integer("kv-heads", "H", 1, 1024, "", "DIFF key/value heads, GQA when fewer (default: --heads)"),
          integer("vocab", "V", 259, 1 << 24, std::to_string(d.vocab_size), "vocabulary size")};
}

PairSpec pair_spec(const Args& a) {
  PairSpec s;
  s.hidden_size = a.get_int("hidden");
  s.num_layers = a.get_int("layers");
  s.diff_heads = a.get_int("heads");
  s.diff_kv_heads = a.get_int("kv-heads", static_cast<int>(s.diff_heads));
  s.vocab_size = a.get_int("vocab");
  return s;
}

std::vector<std::filesystem::path> data_dirs() {
  std::vector<std::filesystem::path> dirs;
  if (const char* env = std::getenv("DIFFLENS_DATA_DIR"); env && *env) dirs.emplace_back(env);
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0)  // installed: PREFIX/bin/difflens beside PREFIX/share/difflens; a build tree links its own
    dirs.push_back(
        std::filesystem::path(std::string(exe, static_cast<size_t>(n))).parent_path().parent_path() /
        "share" / "difflens");
  return dirs;
}

std::string default_export_dir(bool cwd_writable, const char* home) {
  if (cwd_writable || !home || !*home) return "";
  return (std::filesystem::path(home) / "difflens-exports").string();
}

std::string bundled_asset(const std::string& relative) {
  std::string tried;
  for (const auto& dir : data_dirs()) {
    std::error_code ec;
    if (std::filesystem::exists(dir / relative, ec))
      return std::filesystem::weakly_canonical(dir / relative).string();
    tried += "\n  " + (dir / relative).string();
  }
  throw Error("the bundled " + relative + " was not found; looked in:" + tried +
              "\n(set DIFFLENS_DATA_DIR to a folder laid out as PREFIX/share/difflens, or name the file)");
}

std::string bundled_model(const char* name) {
  return bundled_asset(std::string("models/") + name);
}

std::string read_file(const std::string& path, const char* what) {
  // Read whole, stopping at the text limit (a device or a pipe that goes on included) or at half the memory
  // available, whichever is less.
  const uint64_t have = available_memory_bytes();
  const uint64_t limit = have > 0 ? std::min<uint64_t>(kTextLimit, have / 2) : kTextLimit;
  return read_bounded(path, what, limit);
}

void check_output_dir(const std::string& path, const char* flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string named = std::string(flag) + " " + path;
  if (fs::exists(path, ec) && !fs::is_directory(path, ec))
    throw Error(named + ": is a file; give a folder (it is created when missing)");
  // Nothing is created here (a command refused later leaves no empty folder behind): the folder, or the
  // nearest part of its path that exists, must be a folder this process can write into.
  fs::path existing = fs::path(path).lexically_normal();
  while (!existing.empty() && !fs::exists(existing, ec)) existing = existing.parent_path();
  if (existing.empty()) existing = ".";
  if (!fs::is_directory(existing, ec))
    throw Error(named + ": " + existing.string() + " is a file, so the folder cannot be created there");
  if (access(existing.c_str(), W_OK | X_OK) != 0)
    throw Error(named + ": " + existing.string() + " is not writable");
}

std::string lowercase_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

void check_output_file(const std::string& path, const char* flag,
                       const std::vector<std::string>& extensions) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw Error(std::string(flag) + ": give a file name");
  if (fs::is_directory(path, ec))
    throw Error(std::string(flag) + " " + path + ": is a folder; give a file name");
  const std::string ext = lowercase_extension(path);
  if (!extensions.empty() && std::find(extensions.begin(), extensions.end(), ext) == extensions.end()) {
    std::string list;
    for (const auto& e : extensions) list += (list.empty() ? "" : " or ") + e;
    throw Error(std::string(flag) + " " + path + ": writes " + list + " files; name it " +
                fs::path(path).replace_extension(extensions.front()).string());
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) check_output_dir(parent.string(), flag);
}

int default_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void apply_threads(const Args& a) {
  set_num_threads(a.has("threads") ? a.get_int("threads") : default_threads());
}

void progress(const char* format, ...) {
  char line[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  if (isatty(fileno(stderr)))
    std::fprintf(stderr, "\r%s   ", line);
  else
    std::fprintf(stderr, "%s\n", line);
  std::fflush(stderr);
}

void progress_done() {
  if (isatty(fileno(stderr))) std::fprintf(stderr, "\n");
}

bool quick_mode() {
  const char* v = std::getenv("DIFFLENS_QUICK");
  return v && *v && std::string(v) != "0";
}

int64_t quick_cap(const char* what, int64_t value, int64_t cap) {
  if (!quick_mode() || value <= cap) return value;
  std::fprintf(stderr, "DIFFLENS_QUICK: %s %lld -> %lld\n", what, static_cast<long long>(value),
               static_cast<long long>(cap));
  return cap;
}

DeviceChoice device(const Args& a) {
  return parse_device(a.get("device"));
}

std::vector<std::string> model_dirs(const Args& a, size_t exactly, const char* expects) {
  std::vector<std::string> dirs;
  if (!a.has("models")) return {bundled_model("diff-small"), bundled_model("baseline-small")};
  std::stringstream ss(a.get("models"));
  for (std::string d; std::getline(ss, d, ',');) {
    if (d.empty()) continue;
    // A folder holding models in sub-folders (the diff-mlx pair) or a hub cache folder: the models in it,
    // DIFF first. Remote models and paths that are not there are left to the loader to report.
    std::error_code ec;
    if (d.rfind("remote://", 0) != 0 && std::filesystem::is_directory(d, ec)) {
      for (const auto& m : models_in(d)) dirs.push_back(m.string());
      continue;
    }
    dirs.push_back(d);
  }
  if (exactly > 0 && dirs.size() != exactly)
    throw Error(std::string("--models expects ") + expects + ", got '" + a.get("models") + "'");
  if (dirs.empty()) throw Error("--models expects one or more model directories, comma-separated");
  return dirs;
}

std::string prompt_text(const Args& a) {
  if (a.has("prompt") == a.has("prompt-file")) throw Error("give exactly one of --prompt, --prompt-file");
  return a.has("prompt") ? a.get("prompt") : read_file(a.get("prompt-file"));
}

Specials prompt_specials(const Args& a) {
  return a.takes("specials") && a.get("specials") == "text" ? Specials::text : Specials::match;
}

std::vector<int64_t> prompt_ids(const Args& a, const Model& model) {
  const bool ids = a.takes("token-ids") && a.has("token-ids");
  const int sources = a.has("prompt") + a.has("prompt-file") + ids;
  if (sources != 1)
    throw Error(a.takes("token-ids") ? "give exactly one of --prompt, --prompt-file, --token-ids"
                                     : "give exactly one of --prompt, --prompt-file");
  if (ids && prompt_specials(a) == Specials::text)
    throw Error("--specials is for a text prompt, not --token-ids");
  PromptInput in;
  if (ids) {
    in.ids = parse_token_ids(a.get("token-ids"), model.config().vocab_size);
  } else {
    in.text = a.has("prompt") ? a.get("prompt") : read_file(a.get("prompt-file"));
    if (in.text.empty()) throw Error("the prompt is empty: nothing to run");
    in.bos = !(a.takes("no-bos") && a.has("no-bos"));
    in.specials = prompt_specials(a);
  }
  std::vector<int64_t> out =
      encode_prompt(model, in, a.takes("token-ids") ? "give --token-ids" : "this command takes text only")
          .ids;
  const std::string note = positions_note(model.config(), static_cast<int64_t>(out.size()));
  if (!note.empty()) std::fprintf(stderr, "difflens: note: %s\n", note.c_str());
  return out;
}

size_t pooled_budget_bytes(const Args& a) {
  return a.has("pooled-budget") ? static_cast<size_t>(a.get_double("pooled-budget") * 1024 * 1024) : 0;
}

std::string mb(size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::atomic<bool> g_stop{false};

void on_interrupt(int) {
  g_stop = true;
}

Model load_model(const std::string& dir, DeviceChoice device) {
  auto previous = std::signal(SIGINT, on_interrupt);
  bool shown = false;
  try {
    Model m = Model::load(
        dir, device,
        [&](int64_t done, int64_t total) {
          if (total < 50 || !isatty(2)) return;  // a live line for people, nothing for logs
          std::fprintf(stderr, "\rloading %s: %lld/%lld tensors", dir.c_str(), static_cast<long long>(done),
                       static_cast<long long>(total));
          shown = true;
        },
        &g_stop);
    if (shown) std::fprintf(stderr, "\n");
    std::signal(SIGINT, previous);
    return m;
  } catch (const Cancelled&) {
    std::signal(SIGINT, previous);
    throw Error("loading " + dir + " stopped by Ctrl-C");
  } catch (...) {
    if (shown) std::fprintf(stderr, "\n");
    std::signal(SIGINT, previous);
    throw;
  }
}

std::string describe_model(const Model& m) {
  const ModelConfig& c = m.config();
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s, %lld layers x %lld heads, %.2f M params, %s", to_string(c.attention),
                static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.map_heads()),
                static_cast<double>(m.parameter_count()) / 1e6, m.device_name().c_str());
  std::string d = buf;
  if (c.architecture != "difflens") d += ", " + c.architecture;
  if (c.is_diff() && c.diff_pairing == DiffPairing::Half) d += " (components in halves)";
  if (m.source_dtype() != "F32")
    d += ", " + m.source_dtype() + " weights (" + m.weight_storage() + " in memory, F32 arithmetic)";
  if (!m.tokenizer_note().empty()) d += "; " + m.tokenizer_note();
  return d;
}

}  // namespace difflens::cli
