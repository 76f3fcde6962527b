// Head scores as TransformerLens's head detector defines them (transformer_lens/head_detector.py:
// get_previous_token_head_detection_pattern, get_duplicate_token_head_detection_pattern,
// get_induction_head_detection_pattern, and compute_head_attention_similarity_score with its default "mul"
// error measure): a detection pattern D, a 0/1 lower-triangular T x T matrix over the prompt's tokens t,
//   previous token:  D[i][j] = 1 when j = i − 1
//   duplicate token: D[i][j] = 1 when j < i and t[j] = t[i]
//   induction:       D[i][j] = 1 when 1 ≤ j ≤ i and t[j − 1] = t[i], j − 1 < i   (the token after an
//                    earlier copy of the current one: the duplicate pattern shifted one key right)
// and a head's score  Σ_ij A[i][j] · D[i][j] / Σ_ij |A[i][j]|.
// For softmax maps (the baseline, A1, A2) |A| = A and this is TransformerLens's score exactly: the share of
// the head's attention on the pattern's cells, in [0, 1]. DIFF's A1 − λA2 has negative weights: the
// denominator is its absolute mass (as the attention-noise metrics, core/formats/metrics.h), so the score
// stays in [−1, 1] and counts weight taken away from the pattern against it. Plain C++, no LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace difflens {

class Tokenizer;

enum class HeadPattern { PreviousToken, DuplicateToken, Induction };
const char* head_pattern_name(HeadPattern pattern);  // "previous-token", "duplicate-token", "induction"

// D for the tokens, T x T row-major (T = tokens.size()), 0 or 1.
std::vector<uint8_t> detection_pattern(HeadPattern pattern, const std::vector<int64_t>& tokens);

// The score of one T x T row-major map (causal: the cells above the diagonal are not read). exclude_bos
// and exclude_current_token as TransformerLens's options (off by default there and here): key 0, and the
// diagonal, left out of numerator and denominator. 0 for a map with no weight left.
double head_score(const float* map, int64_t T, const std::vector<uint8_t>& pattern, bool exclude_bos = false,
                  bool exclude_current_token = false);

// The prompt an induction score needs (TransformerLens's demos and ARENA: random tokens, then the same
// again): `bos` (when ≥ 0), then `length` tokens drawn uniformly from [lo, hi) by a seeded generator, then
// those `length` tokens once more; 2·length (+1) tokens. The same seed gives the same tokens everywhere.
std::vector<int64_t> repeated_random_tokens(int64_t length, uint64_t seed, int64_t lo, int64_t hi,
                                            int64_t bos);

// The same for a prompt that is text (the GUI's, `difflens heads --repeated`): ids drawn uniformly from the
// tokenizer's vocabulary, BOS and EOS left out, and an id kept only when the text so far reads back as
// exactly the ids so far (so the text typed into the prompt is the random sequence, twice, token for token).
// `text` has no BOS (the tokenizer adds it); `ids` are what the tokenizer reads from it, with BOS. A
// tokenizer without text (ids-only) gets uniform ids (BOS and EOS left out) written as "1, 450, 3", BOS
// first. Throws Error when the tokenizer keeps too few of its ids.
struct RepeatedPrompt {
  std::string text;
  std::vector<int64_t> ids;
};
RepeatedPrompt repeated_random_prompt(const Tokenizer& tok, int64_t length, uint64_t seed);

}  // namespace difflens
