// The fuzz targets' main() where libFuzzer is not linked (gcc builds, ctest):
//   fuzz_X FILE_OR_DIR...                     replays every input (a directory: every file in it, sorted) and
//                                             fails when there is none; a crash is the test's failure.
//   fuzz_X --mutate SECONDS [--seed N] [--crash-dir DIR] CORPUS_DIR...
//                                             a plain mutation fuzzer (no coverage feedback) for machines
//                                             without clang: byte flips, interesting numbers, insertions,
//                                             deletions, splices of two inputs, the multi-file separator.
//                                             An input that crashes is written to DIR (default .) first.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// The input being run, for the crash handler (written with async-signal-safe calls only).
const std::string* g_current = nullptr;
char g_crash_path[4096] = "";

void on_crash(int sig) {
  if (g_current && g_crash_path[0]) {
    const int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      const char* p = g_current->data();
      size_t left = g_current->size();
      while (left > 0) {
        const ssize_t n = ::write(fd, p, left);
        if (n <= 0) break;
        p += n;
        left -= static_cast<size_t>(n);
      }
      ::close(fd);
      const char msg[] = "fuzz driver: crashing input written to ";
      (void)!::write(2, msg, sizeof msg - 1);
      (void)!::write(2, g_crash_path, std::strlen(g_crash_path));
      (void)!::write(2, "\n", 1);
    }
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::filesystem::path> inputs(const std::vector<std::string>& args) {
  std::vector<std::filesystem::path> files;
  for (const std::string& a : args) {
    if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(a))
        if (e.is_regular_file()) files.push_back(e.path());
    } else if (std::filesystem::is_regular_file(a)) {
      files.push_back(a);
    } else {
      std::fprintf(stderr, "fuzz driver: %s is neither a file nor a directory\n", a.c_str());
      std::exit(2);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// Runs one input; it stays the crash handler's "current input" until the next one (a crash between two runs,
// in the driver itself, is reported with the last input run).
void run(const std::string& input) {
  g_current = &input;
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
}

// One to four random edits of `s`, some of them aimed at what the readers parse: numbers, lengths, JSON.
void mutate(std::string& s, const std::vector<std::string>& corpus, std::mt19937_64& rng) {
  static const char* const kNumbers[] = {"0",
                                         "-1",
                                         "1",
                                         "255",
                                         "65536",
                                         "2147483647",
                                         "-2147483648",
                                         "4294967296",
                                         "9223372036854775807",
                                         "18446744073709551615",
                                         "1e308",
                                         "-1e308",
                                         "1e-320",
                                         "NaN",
                                         "Infinity",
                                         "3.5",
                                         "[]",
                                         "{}",
                                         "null",
                                         "true",
                                         "\"\"",
                                         "99999999999999999999999"};
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 9) {
      case 0:  // flip a bit
        if (!s.empty()) s[pick(s.size())] ^= static_cast<char>(1u << (rng() % 8));
        break;
      case 1:  // a random byte
        if (!s.empty()) s[pick(s.size())] = static_cast<char>(rng());
        break;
      case 2: {  // insert random bytes
        std::string bytes(1 + pick(8), '\0');
        for (char& c : bytes) c = static_cast<char>(rng());
        s.insert(pick(s.size() + 1), bytes);
        break;
      }
      case 3:  // delete a range
        if (!s.empty()) {
          const size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(64, s.size() - at)));
        }
        break;
      case 4: {  // duplicate a range
        if (s.empty()) break;
        const size_t at = pick(s.size()), n = 1 + pick(std::min<size_t>(256, s.size() - at));
        s.insert(pick(s.size() + 1), s.substr(at, n));
        break;
      }
      case 5: {  // replace a run of digits (a JSON number, a length) by an interesting one
        std::vector<size_t> digits;
        for (size_t i = 0; i < s.size(); ++i)
          if (s[i] >= '0' && s[i] <= '9' && (i == 0 || s[i - 1] < '0' || s[i - 1] > '9')) digits.push_back(i);
        if (digits.empty()) break;
        const size_t at = digits[pick(digits.size())];
        size_t end = at;
        while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
        s.replace(at, end - at, kNumbers[pick(sizeof kNumbers / sizeof *kNumbers)]);
        break;
      }
      case 6:  // the 8-byte little-endian length in front of a safetensors header
        if (s.size() >= 8) {
          const uint64_t v =
              rng() % 3 == 0 ? rng() : (rng() % 2 ? s.size() : s.size() - 8 + (rng() % 17) - 8);
          std::memcpy(&s[0], &v, 8);
        }
        break;
      case 7: {  // splice with another input
        const std::string& o = corpus[pick(corpus.size())];
        if (o.empty()) break;
        const size_t a = pick(s.size() + 1), b = pick(o.size());
        s = s.substr(0, a) + o.substr(b);
        break;
      }
      case 8:  // the multi-file separator
        s.insert(pick(s.size() + 1), difflens::fuzz::kSeparator);
        break;
    }
  }
  if (s.size() > (1u << 20)) s.resize(1u << 20);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  double seconds = -1;
  uint64_t seed = 1;
  std::string crash_dir = ".";
  std::vector<std::string> paths;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--mutate" && i + 1 < args.size())
      seconds = std::stod(args[++i]);
    else if (args[i] == "--seed" && i + 1 < args.size())
      seed = std::stoull(args[++i]);
    else if (args[i] == "--crash-dir" && i + 1 < args.size())
      crash_dir = args[++i];
    else
      paths.push_back(args[i]);
  }
  const std::vector<std::filesystem::path> files = inputs(paths);
  if (files.empty()) {
    std::fprintf(stderr, "fuzz driver: no inputs (give corpus files or directories)\n");
    return 2;
  }
  for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) std::signal(sig, on_crash);
  std::vector<std::string> corpus;
  g_crash_path[0] = '\0';  // replaying: a crashing input is a file already
  for (const auto& f : files) {
    corpus.push_back(read_bytes(f));
    std::fprintf(stderr, "%s\n", f.c_str());  // the last name printed is the input that crashed, if one does
    run(corpus.back());
  }
  std::printf("replayed %zu inputs\n", files.size());
  if (seconds <= 0) return 0;

  std::snprintf(g_crash_path, sizeof g_crash_path, "%s/crash-%d", crash_dir.c_str(),
                static_cast<int>(::getpid()));
  std::mt19937_64 rng(seed);
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t execs = 0;
  std::vector<std::string> pool = corpus;
  std::string inputs[2];  // the input being run and the one before, alternately (the handler reads one)
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds) {
    std::string& s = inputs[execs % 2];
    s = pool[static_cast<size_t>(rng() % pool.size())];
    mutate(s, pool, rng);
    run(s);
    ++execs;
    // Keep some mutants as parents (no coverage feedback: a bounded random walk around the seeds).
    if (rng() % 16 == 0) {
      if (pool.size() < corpus.size() + 256)
        pool.push_back(s);
      else
        pool[corpus.size() + static_cast<size_t>(rng() % 256)] = s;
    }
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("mutated: %llu executions in %.1f s (%.0f/s), no crash\n",
              static_cast<unsigned long long>(execs), took, static_cast<double>(execs) / took);
  return 0;
}
