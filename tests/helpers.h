// Shared fixtures for the tests: scratch directories and tiny model configurations.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "core/formats/atomic_file.h"
#include "core/formats/config.h"
#include "core/formats/trace.h"

namespace difflens::test {

// Built with AddressSanitizer (scripts/test's build-sanitize/): its quarantine and shadow memory make
// resident-memory figures meaningless, so memory-ceiling checks are left out there (each says so).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif

// A fresh, empty directory under the system temp dir, removed when the object dies.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("difflens-test-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::error_code ec;
    remove_tree(path_, ec);  // not std::filesystem::remove_all: see core/formats/atomic_file.h
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    remove_tree(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& s) const { return path_ / s; }

 private:
  std::filesystem::path path_;
};

// A small model config (vocab 259 = bytes tokenizer minimum).
inline ModelConfig tiny_config(AttentionKind kind, int64_t hidden = 32, int64_t layers = 2,
                               int64_t diff_heads = 2, int64_t diff_kv_heads = 2) {
  PairSpec s;
  s.hidden_size = hidden;
  s.num_layers = layers;
  s.diff_heads = diff_heads;
  s.diff_kv_heads = diff_kv_heads;
  s.vocab_size = 259;
  s.max_position_embeddings = 512;
  auto [d, b] = make_matched_pair(s);
  return kind == AttentionKind::Diff ? d : b;
}

// H output heads of width d, each with two query sub-heads; kv key/value heads shared by a head's pair.
inline ModelConfig v2_config(int64_t H = 4, int64_t kv = 4, int64_t d = 8, int64_t E = 32,
                             int64_t layers = 2) {
  ModelConfig c;
  c.attention = AttentionKind::DiffV2;
  c.hidden_size = E;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 2 * H;
  c.num_key_value_heads = kv;
  c.head_dim = d;
  c.intermediate_size = 48;
  c.vocab_size = 259;
  c.max_position_embeddings = 512;
  c.subln_weight = false;
  c.name = "v2-test";
  return c;
}

// Two float arrays hold the same bits (NaN cells included); memcmp of empty arrays' null data is UB.
inline bool same_bits(const FloatArray& a, const FloatArray& b) {
  return a.data.size() == b.data.size() && a.shape == b.shape &&
         (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.bytes()) == 0);
}

// The largest |a - b| over two arrays of one shape.
inline double max_diff(const FloatArray& a, const FloatArray& b) {
  REQUIRE(a.shape == b.shape);
  double m = 0;
  for (size_t i = 0; i < a.data.size(); ++i)
    m = std::max(m, std::fabs(double(a.data[i]) - double(b.data[i])));
  return m;
}

inline std::vector<int64_t> random_ids(size_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

// Ends the test process as "skipped" for ctest (SKIP_RETURN_CODE 77), printing the reason.
[[noreturn]] inline void skip(const std::string& reason) {
  std::printf("SKIPPED: %s\n", reason.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

// Whether a run of the app failed because the X server refused the connection ("Failed to open display"):
// Xvfb under `ctest -j` now and then turns a client away (the clean clone of 47262fd lost one window test
// to it); the app is not at fault, and the tests that launch it try once more after a pause.
inline bool display_refused(const std::string& output) {
  return output.find("Failed to open display") != std::string::npos;
}

inline std::string read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A text's lines as the tokenizer reference scripts split them (a final newline ends the last line).
inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) nl = text.size();
    out.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return out;
}

inline void write_all(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

#ifdef DIFFLENS_EXE
// The difflens executable run with `args` in `dir` (its log there): its exit status and all it printed.
struct CliRun {
  int status;
  std::string out;
};
inline CliRun run_cli(const std::string& args, const ScratchDir& dir) {
  const std::string log = (dir / "cli.log").string();
  const int raw = std::system((std::string(DIFFLENS_EXE) + " " + args + " > '" + log + "' 2>&1").c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_all(log)};
}
#endif

}  // namespace difflens::test
