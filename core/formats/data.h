// Training data and key-information retrieval episodes (the paper's needle task in miniature).
// Plain C++ (no LibTorch): text is assembled first, then tokenized once, and spans are mapped from
// byte offsets to token positions, so what a model sees is exactly what the spans describe.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/formats/tokenizer.h"

namespace difflens {

// Which names and codes an episode may use: training and evaluation sets are disjoint.
enum class NeedleSplit { Train, Eval };

// Which list of names needles use. SingleToken (the default): names that the bundled tokenizer keeps as
// one piece ("▁Mary"), so looking a code up is a one-token key match. Original: the names of the
// bundled pair's first training phase, two to four pieces each; kept so that phase can be trained with the
// same names (not the same rows: since no key comes twice in a row, train-small.json draws other rows than
// the ones the bundled pair saw).
// Vocabulary: for training, a wide pool of keys, every capitalised word the tokenizer keeps as one piece
// ("▁River", "▁Paris") but function words, the wording's own words and the held-out evaluation names;
// evaluation keeps SingleToken's held-out given names (EpisodeBuilder::keys()).
// GivenNames: real given names and words of one to four pieces of the model's own tokenizer. For training:
// half the draws from a list of given names ("Priya", "Bogdan" ...), half from words (the Vocabulary pool and
// the tokenizer's word pieces capitalised: "River", "Remember" ...); for evaluation: a held-out list of given
// names that no training pool holds, those of three or four pieces only (the hard case: "Priya" is
// "_P ri ya"), see given_names().
enum class NameSet { SingleToken, Original, Vocabulary, GivenNames };
// "single-token" | "original" | "vocabulary" | "given-names"; throws Error
NameSet parse_name_set(const std::string& s);
std::string to_string(NameSet s);

// One needle: "The secret code of <name> is <code>."
struct Needle {
  std::string name;
  std::string code;          // digits (four unless the builder draws other lengths)
  int wording = 0;           // which of the builder's wordings the needle sentence uses
  int question_wording = 0;  // and which the question asking for it uses
};

struct Span {
  int64_t begin = 0;  // token positions, [begin, end)
  int64_t end = 0;
};

// A haystack with needles, followed by questions. For question q the prompt is ids[0, prompt_end[q])
// and the expected continuation is the code, at token positions answer[q].
struct Episode {
  std::string text;
  std::vector<int64_t> ids;
  std::vector<Needle> needles;          // in the order they appear in the haystack
  std::vector<Span> needle_spans;       // each needle sentence
  std::vector<Span> needle_code_spans;  // the code inside each needle sentence
  std::vector<int> queried;             // indices into `needles`, in question order
  std::vector<Span> question_spans;     // each "Q: ... A: The secret code of X is" span
  std::vector<Span> answer_spans;       // the code tokens after each question
  std::vector<double> depths;           // requested depth of each needle (0..1 of the haystack)
  // Where each needle was put: the haystack tokens before it over all haystack tokens (0..1). A needle goes
  // between sentences, so this is the boundary nearest the request, not the request itself.
  std::vector<double> placed_depths;
};

constexpr double kDepthTolerance = 0.1;  // of the haystack's tokens; see EpisodeSpec::depth_by_tokens

struct EpisodeSpec {
  int64_t context_tokens = 256;  // total length target (haystack + needles + questions + answers)
  int needles = 1;               // N
  int queried = 1;               // R ≤ N
  std::vector<double> depths;    // one per needle in [0, 1]; empty = uniform random
  bool final_answer = true;      // include the last answer's code (false: prompt ends before it)
  int64_t haystack_tokens = -1;  // >= 0: exactly this much haystack budget instead of filling the context
  std::vector<int> ask;          // which needles (indices into depths) to ask, in order; empty = R at random
  // true: a depth is a fraction of the haystack's tokens, the needle put at the sentence boundary nearest to
  // it; when the haystack's sentences leave no boundary within kDepthTolerance of a requested depth, up to
  // 32 other stretches of the haystack are tried and the closest fit kept (so that 0 % and 25 % of a short
  // context are two different places, not one). false: a fraction of its sentences (how the bundled pair's
  // training data was built; kept for reproducibility).
  bool depth_by_tokens = true;
  const std::vector<std::string>* avoid = nullptr;  // keys not to use (those already in a training row)
};

// Sentences of natural text with their token counts, used as haystack material.
class Haystack {
 public:
  // Splits `text` into sentences (on ". ", "? ", "! " and newlines). Throws Error when empty.
  Haystack(const std::string& text, const Tokenizer& tokenizer);
  size_t size() const { return sentences_.size(); }
  const std::string& sentence(size_t i) const { return sentences_[i]; }
  int64_t tokens(size_t i) const { return tokens_[i]; }

 private:
  std::vector<std::string> sentences_;
  std::vector<int64_t> tokens_;
};

// The wording of needles and questions. "{name}" and "{code}" are replaced by the needle's name and
// four-digit code. The needle holds {code} exactly once; the question holds {name} and no {code}: the
// answer " <code>." follows it. The defaults are the sentences the bundled pair was trained on.
struct NeedleTemplate {
  std::string needle = "The secret code of {name} is {code}.";
  std::string question = "Q: What is the secret code of {name}?\nA: The secret code of {name} is";
  // Throws Error saying what is wrong (missing or repeated placeholder, unknown "{...}").
  void validate() const;
};

// The wordings of the trained-with-variety recipe: several ways to state a needle and to ask for it. Train:
// the default NeedleTemplate first, then others; Eval: phrasings no training row uses (held out), so that
// retrieval is measured on sentences the model has not seen. Every one validates.
const std::vector<NeedleTemplate>& needle_wordings(NeedleSplit split);

// needle_wordings(Train) and eighteen more wordings (24 needles, 24 questions), none held out.
const std::vector<NeedleTemplate>& wide_needle_wordings();

// wide_needle_wordings() and eight more (32 needles, 32 questions): past tenses ("... was {code}") and
// reported speech ("I heard that ...", "They told me ..."), which the wide set lacks. None is, or asks, a
// held-out phrasing. Added on a misreading of which held-out wording held the baseline back: it is not this
// past tense but the other one (noun_needle_wordings(); assets/models/train-names.json's comment).
const std::vector<NeedleTemplate>& wider_needle_wordings();

// wider_needle_wordings() and eight more (40 needles, 40 questions) whose secret is another noun (a PIN, a
// passcode, a combination, an access key, lock digits ...), asked for as a code, a number, a combination, a
// key or a PIN. None is, or asks, a held-out phrasing verbatim, and no needle or question says "password";
// but three questions are near the held-out "Q: Tell me the code of {name}." - "Say the code of {name}.",
// "Recall the code of {name}." and "What is the code of {name}?", each with the held-out answer start "The
// code of {name} is" (which the train set has had since step 5000). So of the held-out password wording, the
// needle sentence is new to the models and its question a near neighbour of trained ones. Added after that
// wording held the baseline at 0.50-0.69 of 80 episodes at 256 tokens on every kept step from 20000 on.
const std::vector<NeedleTemplate>& noun_needle_wordings();

// Given names for NameSet::GivenNames: Train and Eval are disjoint and neither holds SingleToken's held-out
// names. Pieces are not counted here (that needs a tokenizer): see EpisodeBuilder::keys().
const std::vector<std::string>& given_names(NeedleSplit split);

// Pieces a key takes where a needle puts it ("of <key> is" less the two words around it).
int key_pieces(const Tokenizer& tokenizer, const std::string& key);

class EpisodeBuilder {
 public:
  // Throws Error for a template that does not validate, or a Vocabulary pool the tokenizer cannot fill.
  // zipf_fraction: the share of key draws weighted 1/(rank + 1) over the pool's ranking (the tokenizer's
  // order of ids, its most frequent pieces first); the rest are uniform.
  EpisodeBuilder(const Haystack& haystack, const Tokenizer& tokenizer, NeedleSplit split,
                 NameSet names = NameSet::SingleToken, NeedleTemplate wording = {}, double zipf_fraction = 0);
  // Builds an episode whose token count is at most spec.context_tokens (and close to it).
  // Throws Error when the spec cannot be met (e.g. R > N or a context too short for the questions).
  Episode build(const EpisodeSpec& spec, std::mt19937_64& rng) const;

  std::string needle_sentence(const Needle& n) const;
  std::string question(const Needle& n) const;  // the code follows after a space
  const NeedleTemplate& wording() const { return wordings_.front(); }
  // Several wordings: each needle and each question draws one (uniformly, independently). One wording (the
  // default) draws nothing, so episodes stay the ones the earlier recipes made. Throws Error for an empty
  // list or a wording that does not validate.
  void set_wordings(std::vector<NeedleTemplate> wordings);
  const std::vector<NeedleTemplate>& wordings() const { return wordings_; }
  // Codes of `min`..`max` digits (a length drawn uniformly, then a code of that length without a leading
  // zero, in the split: Eval codes divisible by 7). The default 4..4 draws as the earlier recipes did.
  void set_code_digits(int min, int max);
  int code_digits_max() const { return code_max_; }
  // The keys this builder draws from, in ranking order.
  const std::vector<std::string>& keys() const { return keys_; }

 private:
  // Throws Error when no key outside `taken` and `avoid` is left.
  Needle random_needle(std::mt19937_64& rng, const std::vector<Needle>& taken,
                       const std::vector<std::string>* avoid) const;
  const Haystack& haystack_;
  const Tokenizer& tokenizer_;
  NeedleSplit split_;
  NameSet names_;
  std::vector<NeedleTemplate> wordings_;
  int code_min_ = 4, code_max_ = 4;
  std::vector<std::string> keys_;
  size_t name_keys_ = 0;  // GivenNames training: keys_[0, name_keys_) are names, the rest words
  std::vector<double> zipf_cumulative_;  // Σ 1/(r + 1) up to each rank
  double zipf_fraction_ = 0;
};

// The Vocabulary pool of a tokenizer: its single-piece capitalised words (a letter A-Z then a-z, at least
// three letters, kept as one piece after a space) in id order, minus function words, the wording's words and
// SingleToken's held-out evaluation names. Empty for a tokenizer without such pieces.
std::vector<std::string> vocabulary_keys(const Tokenizer& tokenizer, const NeedleTemplate& wording = {});

// Names available to a split (disjoint between Train and Eval).
const std::vector<std::string>& needle_names(NeedleSplit split, NameSet set = NameSet::SingleToken);
// Whether a code belongs to the split (Eval: code % 7 == 0; Train: the rest).
bool code_in_split(int code, NeedleSplit split);

// One training row of exactly `length` + 1 tokens: inputs ids[0..length), targets ids[1..length].
// `answers` lists the positions in ids of needle-code tokens that follow a question (the retrieval targets),
// so a trainer can weight them. `keys`: every needle's key in the row (none twice); `drill_sizes` and
// `episode_sizes`: the needles of each drill and each haystack episode, in row order.
struct TrainingRow {
  std::vector<int64_t> ids;
  std::vector<int64_t> answers;
  std::vector<std::string> keys;
  std::vector<int> drill_sizes, episode_sizes;
  int64_t filled = 0;  // tokens of the row's episodes and drills, at its start (the rest is text)
};

// What a training row is made of: natural text, rows packed with haystack episodes (1-4 needles in
// natural text, every needle asked), or dense recall drills (2-8 needles with little text between, then
// every needle asked in shuffled order): the many-keys, many-queries form small models learn lookup from.
struct DataMix {
  double episode_fraction = 0.5;
  double drill_fraction = 0.0;
  NameSet names = NameSet::SingleToken;
  // Drills: drill_needles_min..max needles (as many as the row's room left holds, at most max; none below
  // min), 0..drill_gap haystack tokens before each needle on average.
  int drill_needles_min = 2, drill_needles_max = 8, drill_gap = 12;
  // Haystack episodes: a length in episode_tokens_min..max (at most the room left), 1..episode_needles
  // needles (at most 4, and at most 2 below 160 tokens).
  int64_t episode_tokens_min = 64, episode_tokens_max = 448;
  int episode_needles = 4;
  // Far episodes: this share of the haystack episodes takes the whole room left (up to episode_tokens_max)
  // and holds one needle at a depth drawn from [0, far_depth], so that the needle sits far from its
  // question (uniform lengths and depths make a question ~500 tokens from its needle rare).
  double far_fraction = 0.0, far_depth = 0.1;
  double zipf_fraction = 0.5;  // Vocabulary keys: the share of draws weighted by rank (EpisodeBuilder)
  // Several wordings (needle_wordings(Train); evaluation during training uses the held-out ones).
  bool varied_wording = false;
  bool wide_wording = false;   // with varied_wording: wide_needle_wordings() instead of the six
  bool wider_wording = false;  // with wide_wording: wider_needle_wordings() instead of the 24
  bool noun_wording = false;   // with wider_wording: noun_needle_wordings() instead of the 32
  // Code lengths in digits. When they vary, the token after each answered code (the full stop) counts as an
  // answer token too, so that a model learns where a code ends.
  int code_digits_min = 4, code_digits_max = 4;
  void validate() const;  // throws Error naming the field
};

// Deterministic source of training rows: rows for step s depend only on (seed, s), so both models of a
// pair see identical data and a resumed run continues the same sequence.
class TrainingData {
 public:
  TrainingData(std::vector<int64_t> stream, const Haystack& haystack, const Tokenizer& tokenizer,
               DataMix mix);
  // A row of the kind drawn from the mix.
  TrainingRow row(int64_t length, std::mt19937_64& rng) const;
  TrainingRow text_row(int64_t length, std::mt19937_64& rng) const;
  TrainingRow episode_row(int64_t length, std::mt19937_64& rng, bool drill) const;
  const std::vector<int64_t>& stream() const { return stream_; }
  const EpisodeBuilder& episodes() const { return episodes_; }

 private:
  std::vector<int64_t> stream_;
  EpisodeBuilder episodes_;
  const Tokenizer& tokenizer_;
  DataMix mix_;
  int64_t needle_tokens_ = 0;  // a needle, its question and answer with the pool's longest key, + 2
};

}  // namespace difflens
