// Head scores (see head_scores.h).
#include "core/head_scores.h"

#include <cmath>
#include <random>

#include "core/error.h"

namespace difflens {

const char* head_pattern_name(HeadPattern pattern) {
  switch (pattern) {
    case HeadPattern::PreviousToken:
      return "previous-token";
    case HeadPattern::DuplicateToken:
      return "duplicate-token";
    case HeadPattern::Induction:
      return "induction";
  }
  return "";
}

std::vector<uint8_t> detection_pattern(HeadPattern pattern, const std::vector<int64_t>& t) {
  const size_t T = t.size();
  std::vector<uint8_t> d(T * T, 0);
  for (size_t i = 0; i < T; ++i)
    for (size_t j = 0; j <= i; ++j) {
      bool on = false;
      switch (pattern) {
        case HeadPattern::PreviousToken:
          on = j + 1 == i;
          break;
        case HeadPattern::DuplicateToken:
          on = j < i && t[j] == t[i];
          break;
        case HeadPattern::Induction:
          on = j >= 1 && j - 1 < i && t[j - 1] == t[i];
          break;
      }
      d[i * T + j] = on ? 1 : 0;
    }
  return d;
}

double head_score(const float* map, int64_t T, const std::vector<uint8_t>& pattern, bool exclude_bos,
                  bool exclude_current_token) {
  if (T < 0 || pattern.size() != static_cast<size_t>(T) * static_cast<size_t>(T))
    throw Error("head_score: the detection pattern is not T x T for T = " + std::to_string(T));
  double on = 0, mass = 0;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      if ((exclude_bos && j == 0) || (exclude_current_token && j == i)) continue;
      const double a = map[i * T + j];
      if (!std::isfinite(a)) continue;
      mass += std::fabs(a);
      if (pattern[static_cast<size_t>(i * T + j)]) on += a;
    }
  return mass > 0 ? on / mass : 0.0;
}

std::vector<int64_t> repeated_random_tokens(int64_t length, uint64_t seed, int64_t lo, int64_t hi,
                                            int64_t bos) {
  if (length < 1)
    throw Error("repeated random tokens: the length must be at least 1, got " + std::to_string(length));
  if (hi <= lo)
    throw Error("repeated random tokens: no token ids in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                ")");
  // Uniform by rejection on a 64-bit Mersenne twister: the same tokens from the same seed on every platform
  // (std::uniform_int_distribution's algorithm is left to the library).
  std::mt19937_64 rng(seed);
  const uint64_t range = static_cast<uint64_t>(hi - lo), limit = UINT64_MAX - UINT64_MAX % range;
  std::vector<int64_t> first(static_cast<size_t>(length));
  for (int64_t& id : first) {
    uint64_t x;
    do x = rng();
    while (x >= limit);
    id = lo + static_cast<int64_t>(x % range);
  }
  std::vector<int64_t> out;
  if (bos >= 0) out.push_back(bos);
  out.insert(out.end(), first.begin(), first.end());
  out.insert(out.end(), first.begin(), first.end());
  return out;
}

}  // namespace difflens
