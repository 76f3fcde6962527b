// Head scores (see head_scores.h).
#include "core/formats/head_scores.h"

#include <cmath>
#include <random>

#include "core/formats/error.h"
#include "core/formats/tokenizer.h"

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

namespace {

// Uniform ids in [lo, hi) by rejection on a 64-bit Mersenne twister: the same ids from the same seed on every
// platform (std::uniform_int_distribution's algorithm is left to the library).
class UniformIds {
 public:
  UniformIds(uint64_t seed, int64_t lo, int64_t hi)
      : rng_(seed), lo_(lo), range_(static_cast<uint64_t>(hi - lo)) {
    limit_ = UINT64_MAX - UINT64_MAX % range_;
  }
  int64_t operator()() {
    uint64_t x;
    do x = rng_();
    while (x >= limit_);
    return lo_ + static_cast<int64_t>(x % range_);
  }

 private:
  std::mt19937_64 rng_;
  int64_t lo_;
  uint64_t range_, limit_ = 0;
};

void check_length(int64_t length) {
  if (length < 1)
    throw Error("repeated random tokens: the length must be at least 1, got " + std::to_string(length));
}

std::vector<int64_t> twice(const std::vector<int64_t>& first, int64_t bos) {
  std::vector<int64_t> out;
  if (bos >= 0) out.push_back(bos);
  out.insert(out.end(), first.begin(), first.end());
  out.insert(out.end(), first.begin(), first.end());
  return out;
}

}  // namespace

std::vector<int64_t> repeated_random_tokens(int64_t length, uint64_t seed, int64_t lo, int64_t hi,
                                            int64_t bos) {
  check_length(length);
  if (hi <= lo)
    throw Error("repeated random tokens: no token ids in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                ")");
  UniformIds draw(seed, lo, hi);
  std::vector<int64_t> first(static_cast<size_t>(length));
  for (int64_t& id : first) id = draw();
  return twice(first, bos);
}

RepeatedPrompt repeated_random_prompt(const Tokenizer& tok, int64_t length, uint64_t seed) {
  check_length(length);
  RepeatedPrompt p;
  if (tok.vocab_size() < 4) throw Error("repeated random tokens: the tokenizer has no tokens to draw");
  UniformIds draw(seed, 0, tok.vocab_size());
  if (!tok.can_encode()) {  // token ids typed as text, as a model without a text tokenizer reads them
    std::vector<int64_t> first;
    while (static_cast<int64_t>(first.size()) < length) {
      const int64_t id = draw();
      if (id != tok.bos_id() && id != tok.eos_id()) first.push_back(id);
    }
    p.ids = twice(first, tok.bos_id());
    for (size_t i = 0; i < p.ids.size(); ++i) p.text += (i ? ", " : "") + std::to_string(p.ids[i]);
    return p;
  }
  std::vector<int64_t> first;
  // Each drawn id is kept when the text so far, decoded and encoded again, gives back exactly the ids so far;
  // the whole sequence twice must too (else its last id is drawn again). A bounded number of draws.
  const int64_t budget = 64 * length + 4096;
  int64_t tries = 0;
  while (true) {
    while (static_cast<int64_t>(first.size()) < length) {
      if (++tries > budget)
        throw Error("repeated random tokens: could not draw " + std::to_string(length) +
                    " tokens whose text reads back as the same tokens with this tokenizer (" +
                    std::to_string(first.size()) + " after " + std::to_string(budget) + " draws)");
      const int64_t id = draw();
      if (id == tok.bos_id() || id == tok.eos_id()) continue;
      first.push_back(id);
      if (tok.encode(tok.decode(first), false).ids != first) first.pop_back();
    }
    p.ids = twice(first, tok.bos_id());
    p.text = tok.decode(std::vector<int64_t>(p.ids.begin() + (tok.bos_id() >= 0 ? 1 : 0), p.ids.end()));
    if (tok.encode(p.text, true).ids == p.ids) return p;
    first.pop_back();
  }
}

}  // namespace difflens
