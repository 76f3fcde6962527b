// Haystacks, needle episodes and training rows.
#include "core/formats/data.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <numeric>
#include <set>

#include "core/formats/error.h"

namespace difflens {
namespace {

// Names of the first training phase of the bundled pair (two to four SentencePiece pieces each).
const char* const kOriginalNames[] = {
    "Mira",  "Tomas",  "Anya",   "Boris",  "Clara",  "Dmitri", "Elena",  "Felix", "Greta",  "Hugo",
    "Irene", "Jonas",  "Karin",  "Lukas",  "Marta",  "Nils",   "Olga",   "Pavel", "Rosa",   "Stefan",
    "Tanya", "Ulrich", "Vera",   "Walter", "Yuri",   "Zora",   "Adam",   "Beth",  "Carl",   "Diana",
    "Edgar", "Fiona",  "George", "Helen",  "Ivan",   "Julia",  "Kevin",  "Laura", "Martin", "Nora",
    "Oscar", "Paula",  "Quinn",  "Ruth",   "Simon",  "Tina",   "Victor", "Wendy", "Xavier", "Yvonne",
    "Alice", "Bruno",  "Cecil",  "Doris",  "Emil",   "Flora",  "Gustav", "Hilda", "Igor",   "Jane",
    "Karl",  "Lena",   "Max",    "Nina",   "Otto",   "Petra",  "Rudolf", "Sara",  "Theo",   "Ursula",
    "Vince", "Wilma",  "Arthur", "Bella",  "Conrad", "Daisy",  "Ernest", "Freda", "Gordon", "Hazel",
};

// Names the bundled tokenizer (unigram 4k on the Brown corpus) keeps as a single piece after a space.
const char* const kSingleTokenNames[] = {
    "John",    "Mary",    "William", "Robert",  "Jack",     "Phil",     "George",  "Thomas",
    "Charles", "James",   "Ben",     "Don",     "Dan",      "Mike",     "Richard", "Sam",
    "Frank",   "Bill",    "Adam",    "Louis",   "Bob",      "Henry",    "Paul",    "Martin",
    "Lewis",   "Jess",    "Joe",     "Francis", "Peter",    "David",    "Carl",    "Alfred",
    "Joseph",  "Edward",  "Charlie", "Warren",  "Arthur",   "Alex",     "Victor",  "Greg",
    "Curt",    "Linda",   "Lucy",    "Rachel",  "Lawrence", "Walter",   "Stanley", "Susan",
    "Samuel",  "Winston", "Morgan",  "Kennedy", "Smith",    "Jones",    "Parker",  "Wilson",
    "Palmer",  "Watson",  "Wright",  "Clark",   "Holmes",   "Thompson", "Hudson",  "Sherman",
};

// Given names for NameSet::GivenNames, from many languages, ASCII only. Held out for evaluation: the names a
// class is likely to type and that the first models failed on (Priya, Oscar, Clara, Lena, Omar, Mira) and
// others of every origin; no training pool holds them.
const char* const kGivenNamesEval[] = {
    "Priya",     "Oscar",  "Clara",   "Lena",    "Omar",    "Mira",    "Anika",    "Bogdan",  "Chiara",
    "Dagny",     "Emeka",  "Farida",  "Giulia",  "Hiroshi", "Ingrid",  "Jovan",    "Kalani",  "Leandro",
    "Malika",    "Nadia",  "Obinna",  "Pilar",   "Quentin", "Rashida", "Sven",     "Tamsin",  "Ulla",
    "Valentina", "Wenzel", "Ximena",  "Yasmin",  "Zoltan",  "Amara",   "Benedikt", "Caspar",  "Delphine",
    "Fenna",     "Gideon", "Hana",    "Ilse",    "Jasper",  "Keiko",   "Lorcan",   "Marisol", "Nikhil",
    "Odile",     "Pranav", "Rafaela", "Saoirse", "Tobias",  "Ugo",     "Vivek",    "Wanda",   "Yusuf",
    "Zainab",    "Anouk",  "Bastian", "Cosima",  "Dario",   "Elif",    "Florian",  "Greer",   "Hamid",
    "Isolde",    "Jarek",  "Kirsi",   "Lucian",  "Maren",   "Nkechi",  "Orla",     "Pietro",  "Renata",
    "Soren",     "Thea",   "Umberto", "Vesna",   "Wiebke",  "Yara",    "Zeno",     "Aurelio", "Brigida",
    "Dragan",    "Eszter", "Folake",  "Gunnar",  "Halima",  "Ignacio", "Jurgen",   "Kavya",   "Ludmila",
};

// Given names for training (SingleToken's held-out names and kGivenNamesEval are taken out in code).
const char* const kGivenNamesTrain[] = {
    "Aaron",    "Abigail",   "Adele",     "Adrian",   "Agnes",    "Ahmed",    "Aisha",     "Alan",
    "Albert",   "Alejandro", "Alexander", "Alina",    "Allison",  "Amelia",   "Amir",      "Ana",
    "Andrea",   "Andrew",    "Angela",    "Anita",    "Anna",     "Anton",    "Antonio",   "Ari",
    "Arjun",    "Astrid",    "Aurora",    "Ava",      "Barbara",  "Beatrice", "Benjamin",  "Bernard",
    "Bianca",   "Brandon",   "Brenda",    "Brian",    "Bridget",  "Caleb",    "Camila",    "Carlos",
    "Carmen",   "Caroline",  "Catherine", "Cedric",   "Chen",     "Chloe",    "Christian", "Christina",
    "Claire",   "Colin",     "Cristina",  "Daniel",   "Daphne",   "Darius",   "Deborah",   "Declan",
    "Dennis",   "Diego",     "Dolores",   "Dominic",  "Dorothy",  "Eduardo",  "Eileen",    "Elena",
    "Eli",      "Elias",     "Eliza",     "Ellen",    "Elsa",     "Emily",    "Emma",      "Enrique",
    "Eric",     "Erin",      "Esther",    "Ethan",    "Eva",      "Evelyn",   "Fabian",    "Fatima",
    "Felipe",   "Fernando",  "Frida",     "Gabriel",  "Gemma",    "Gerald",   "Gina",      "Giorgio",
    "Gloria",   "Grace",     "Hannah",    "Harold",   "Harriet",  "Hassan",   "Heidi",     "Hector",
    "Helga",    "Ian",       "Ibrahim",   "Ines",     "Iris",     "Isaac",    "Isabel",    "Ivana",
    "Jacob",    "Jamal",     "Janet",     "Javier",   "Jenna",    "Jeremy",   "Jessica",   "Joanna",
    "Jorge",    "Josephine", "Juan",      "Judith",   "Julian",   "Justin",   "Kamal",     "Karen",
    "Kasia",    "Kate",      "Katrin",    "Keith",    "Kenji",    "Khalid",   "Kim",       "Klara",
    "Kofi",     "Lara",      "Larissa",   "Leila",    "Leo",      "Leon",     "Liam",      "Lila",
    "Lisa",     "Lorenzo",   "Luca",      "Lucas",    "Luis",     "Luisa",    "Lydia",     "Magnus",
    "Maja",     "Malcolm",   "Manuel",    "Marco",    "Margaret", "Maria",    "Marina",    "Mario",
    "Mark",     "Matteo",    "Maya",      "Megan",    "Mei",      "Melanie",  "Mia",       "Michelle",
    "Miguel",   "Milan",     "Miriam",    "Mohammed", "Monica",   "Nadine",   "Naomi",     "Natalia",
    "Nathan",   "Neil",      "Nicole",    "Noah",     "Noor",     "Olivia",   "Oliver",    "Pablo",
    "Patricia", "Patrick",   "Pedro",     "Penelope", "Philippa", "Rafael",   "Rahul",     "Ravi",
    "Rebecca",  "Reza",      "Ricardo",   "Rita",     "Roberto",  "Rohan",    "Roman",     "Rosa",
    "Ryan",     "Sabine",    "Samira",    "Sandra",   "Sanjay",   "Sarah",    "Sebastian", "Selma",
    "Sergio",   "Shirin",    "Silvia",    "Sofia",    "Sonia",    "Sophie",   "Stella",    "Stephanie",
    "Tariq",    "Teresa",    "Tim",       "Tomasz",   "Trevor",   "Valeria",  "Vanessa",   "Vera",
    "Veronica", "Vincent",   "Viola",     "Wei",      "Xavier",   "Yannick",  "Yuki",      "Yvette",
    "Zara",     "Zoe",       "Ahmad",     "Akira",    "Alberto",  "Anders",   "Beatriz",   "Carla",
    "Cyrus",    "Dalia",     "Eamon",     "Elin",     "Emil",     "Farah",    "Gustavo",   "Hugo",
    "Ilya",     "Imani",     "Ivo",       "Jana",     "Jens",     "Joaquin",  "Kaito",     "Kwame",
    "Laszlo",   "Lotte",     "Mateo",     "Nikolai",  "Nina",     "Olga",     "Oskar",     "Paulina",
    "Raphael",  "Rosalind",  "Sakura",    "Tomas",    "Ulrike",   "Viktor",   "Wilhelm",   "Yosef",
    "Zofia",    "Amina",     "Bruno",     "Cecilia",  "Dmitri",   "Edith",    "Francesca", "Greta",
    "Hanna",    "Ivan",      "Joelle",    "Kira",     "Lucia",    "Mateusz",  "Nils",      "Ottilie",
    "Petra",    "Quinn",     "Rupert",    "Signe",    "Tatiana",  "Ursula",   "Valentin",  "Yolanda",
    "Zuzana",   "Agathe",    "Boris",     "Celeste",  "Desmond",  "Elodie",   "Fintan",    "Gwen",
    "Horatio",  "Irina",     "Jolene",    "Kasper",   "Leopold",  "Mathilde", "Nerys",     "Orlando",
    "Rosalie",  "Sigrid",    "Thaddeus",  "Una",      "Violet",   "Wolfgang", "Xiomara",   "Yvonne",
    "Zachary",  "Adaeze",    "Bilal",     "Chidi",    "Dilnoza",  "Eun",      "Fumiko",    "Gulnara",
    "Hyun",     "Ifeoma",    "Jin",       "Kemal",    "Lakshmi",  "Mehmet",   "Nasrin",    "Oluwaseun",
    "Parisa",   "Rustam",    "Sunita",    "Tendai",   "Uchenna",  "Vikram",   "Wangari",   "Yaw",
};

// The wordings of the varied recipe. The first training wording is NeedleTemplate's default.
const NeedleTemplate kTrainWordings[] = {
    {"The secret code of {name} is {code}.",
     "Q: What is the secret code of {name}?\nA: The secret code of {name} is"},
    {"{name}'s secret code is {code}.", "Q: What code does {name} have?\nA: The code of {name} is"},
    {"The code for {name} is {code}.", "Q: Which number belongs to {name}?\nA: {name}'s number is"},
    {"Remember that the secret number of {name} is {code}.",
     "Question: what is {name}'s secret code?\nAnswer: It is"},
    {"{name} keeps the code {code}.", "Q: What does {name} keep as a code?\nA: {name} keeps"},
    {"Note: {name} has the secret code {code}.", "Q: What is {name}'s code?\nA: {name}'s code is"},
};
// The wide set: the six above, then eighteen more needles and questions (each drawn independently, so 24 x 24
// pairs). None is, or asks, a held-out phrasing below.
const NeedleTemplate kWideWordings[] = {
    {"The number of {name} is {code}.", "Q: Which code belongs to {name}?\nA: The code is"},
    {"{name} was given the code {code}.", "Q: What number was {name} given?\nA: {name} was given"},
    {"Keep in mind that {name}'s number is {code}.",
     "Question: What is the number of {name}?\nAnswer: The number of {name} is"},
    {"The code that belongs to {name} is {code}.", "Q: Can you recall {name}'s code?\nA: {name}'s code is"},
    {"{name} chose {code} as a secret code.", "Q: What is the code for {name}?\nA: The code for {name} is"},
    {"The secret number for {name} is {code}.", "Q: Which secret number does {name} have?\nA: It is"},
    {"Please remember: {name} has the number {code}.", "Q: What code did {name} choose?\nA: {name} chose"},
    {"{name} uses the code {code}.", "Question: Which code opens the lock of {name}?\nAnswer: The code is"},
    {"It is known that the code of {name} is {code}.",
     "Q: What was the secret code of {name}?\nA: The secret code of {name} was"},
    {"For {name}, the secret code is {code}.", "Q: {name}'s code?\nA: {name}'s code is"},
    {"The key code of {name} reads {code}.",
     "Q: Recall the secret number of {name}.\nA: The secret number of {name} is"},
    {"{name}'s number, which is secret, is {code}.",
     "Q: What is {name}'s secret number?\nA: {name}'s secret number is"},
    {"Someone said that {name} has the code {code}.", "Q: What number does {name} use?\nA: {name} uses"},
    {"The lock of {name} opens with {code}.",
     "Question: What did {name} write down?\nAnswer: {name} wrote down"},
    {"Here is a secret: {name}'s code is {code}.",
     "Q: What is the secret of {name}?\nA: {name}'s secret code is"},
    {"{name} wrote down the code {code}.", "Q: Which is {name}'s number?\nA: The number is"},
    {"In the notes, the number of {name} is {code}.",
     "Q: What code does {name} keep?\nA: The code of {name} is"},
    {"Everyone knows {name}'s secret number is {code}.",
     "Q: Which digits make up {name}'s code?\nA: The digits are"},
};
// The wider set: eight more, in the past tense or as reported speech. None is, or asks, a held-out phrasing.
const NeedleTemplate kWiderWordings[] = {
    {"The secret code of {name} was {code}.", "Q: What was {name}'s code?\nA: It was"},
    {"I heard that {name} had the code {code}.", "Q: Which code did {name} have?\nA: {name} had"},
    {"They told me the number of {name} is {code}.",
     "Q: What did they tell you about {name}?\nA: The number of {name} is"},
    {"{name} once had the secret number {code}.", "Q: What number did {name} once have?\nA: {name} had"},
    {"Years ago the code for {name} was {code}.",
     "Q: What was the code for {name}?\nA: The code for {name} was"},
    {"A friend said that {name}'s number is {code}.", "Q: And {name}'s number?\nA: The number is"},
    {"The number that {name} used was {code}.", "Q: Which number did {name} use?\nA: {name} used"},
    {"It was said that {name} kept the code {code}.", "Q: What code did {name} keep?\nA: {name} kept"},
};

// The noun set: eight more whose secret is not a "code" or a "number" (a PIN, a passcode, a combination...),
// so that retrieval does not hang on the noun. None is, or asks, a held-out phrasing verbatim and none names
// a password, but "Say / Recall / What is the code of {name}" are near the held-out "Tell me the code of
// {name}" (data.h, noun_needle_wordings()).
const NeedleTemplate kNounWordings[] = {
    {"{name}'s PIN is {code}.", "Q: What is the code of {name}?\nA: The code of {name} is"},
    {"The passcode of {name} is {code}.", "Q: Which number is {name}'s?\nA: {name}'s number is"},
    {"The combination of {name} is {code}.", "Q: What opens the safe of {name}?\nA: The combination is"},
    {"The access key for {name} is {code}.", "Q: What is the key of {name}?\nA: The key of {name} is"},
    {"{name}'s lock opens to {code}.", "Q: Say the code of {name}.\nA: The code of {name} is"},
    {"The pass number of {name} is {code}.", "Q: Give me {name}'s code.\nA: {name}'s code is"},
    {"The PIN for {name} is {code}.", "Q: What PIN does {name} use?\nA: The PIN is"},
    {"The login digits of {name} are {code}.", "Q: Recall the code of {name}.\nA: The code of {name} is"},
};

const NeedleTemplate kEvalWordings[] = {
    {"The password of {name} is {code}.", "Q: Tell me the code of {name}.\nA: The code of {name} is"},
    {"We were told that {name}'s code was {code}.",
     "Q: Do you know {name}'s secret code?\nA: Yes, the secret code of {name} is"},
};

// Words that are not keys however the tokenizer keeps them: function words, pronouns, auxiliaries and other
// closed-class words that open sentences (a key must read as a name, and the haystack is full of these).
const char* const kFunctionWords[] = {
    "The",       "This",    "That",       "These",    "Those",      "There",     "Then",     "Than",
    "They",      "Them",    "Their",      "Theirs",   "She",        "Her",       "Hers",     "Him",
    "His",       "Its",     "Our",        "Ours",     "You",        "Your",      "Yours",    "Who",
    "Whom",      "Whose",   "What",       "When",     "Where",      "Which",     "While",    "Why",
    "How",       "And",     "But",        "For",      "Nor",        "Yet",       "With",     "Without",
    "Within",    "From",    "Into",       "Onto",     "Upon",       "Over",      "Under",    "After",
    "Before",    "Since",   "Until",      "Till",     "About",      "Above",     "Below",    "Across",
    "Along",     "Among",   "Around",     "Against",  "Between",    "Beyond",    "During",   "Except",
    "Through",   "Toward",  "Towards",    "Although", "Though",     "Because",   "Unless",   "Whether",
    "However",   "Thus",    "Hence",      "Also",     "Still",      "Even",      "Just",     "Only",
    "Now",       "Here",    "Not",        "Yes",      "All",        "Any",       "Some",     "Each",
    "Every",     "Both",    "Either",     "Neither",  "Such",       "Many",      "Much",     "More",
    "Most",      "Few",     "Less",       "Least",    "Other",      "Another",   "Same",     "One",
    "Two",       "Three",   "First",      "Last",     "Was",        "Were",      "Are",      "Been",
    "Being",     "Has",     "Have",       "Had",      "Having",     "Does",      "Did",      "Doing",
    "Will",      "Would",   "Can",        "Could",    "May",        "Might",     "Must",     "Shall",
    "Should",    "Let",     "Too",        "Very",     "Well",       "Mrs",       "Miss",     "Sir",
    "Oh",        "Perhaps", "Indeed",     "Never",    "Ever",       "Always",    "Once",     "Twice",
    "Again",     "Already", "Soon",       "Later",    "Today",      "Yesterday", "Tomorrow", "Someone",
    "Something", "Nothing", "Everything", "Anything", "Everyone",   "Anyone",    "Nobody",   "Himself",
    "Herself",   "Itself",  "Myself",     "Yourself", "Themselves", "Ourselves",
};

std::string four_digits(int code) {
  std::string s = std::to_string(code);
  return std::string(4 - s.size(), '0') + s;
}

// Capitalises a lower-case ASCII word.
std::string capitalised(std::string w) {
  if (!w.empty()) w[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(w[0])));
  return w;
}

// Adds a wording's own words to `words`, capitalised whatever their case ("secret" -> "Secret"): never keys.
void add_wording_words(std::set<std::string>& words, const NeedleTemplate& wording) {
  for (const std::string* t : {&wording.needle, &wording.question}) {
    std::string word;
    for (size_t i = 0; i <= t->size(); ++i) {
      const char c = i < t->size() ? (*t)[i] : ' ';
      if (std::isalpha(static_cast<unsigned char>(c))) {
        word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        continue;
      }
      if (!word.empty()) words.insert(capitalised(word));
      word.clear();
    }
  }
}

// Σ 1/(r + 1) up to each of n ranks: the weights of rank-weighted key draws.
std::vector<double> zipf_cumulative(size_t n) {
  std::vector<double> out;
  double sum = 0;
  for (size_t r = 0; r < n; ++r) out.push_back(sum += 1.0 / static_cast<double>(r + 1));
  return out;
}

// Token span covering the byte span [begin, end) of the encoded text.
Span token_span(const Encoding& e, size_t begin, size_t end) {
  Span s{-1, -1};
  for (size_t i = 0; i < e.ids.size(); ++i) {
    const auto [b, en] = e.offsets[i];
    if (en > begin && b < end) {
      if (s.begin < 0) s.begin = static_cast<int64_t>(i);
      s.end = static_cast<int64_t>(i) + 1;
    }
  }
  if (s.begin < 0) throw Error("episode: a span was lost in tokenization");
  return s;
}

}  // namespace

NameSet parse_name_set(const std::string& s) {
  if (s == "single-token") return NameSet::SingleToken;
  if (s == "original") return NameSet::Original;
  if (s == "vocabulary") return NameSet::Vocabulary;
  if (s == "given-names") return NameSet::GivenNames;
  throw Error("unknown needle name set '" + s +
              "' (expected single-token, original, vocabulary or given-names)");
}

std::string to_string(NameSet s) {
  switch (s) {
    case NameSet::SingleToken:
      return "single-token";
    case NameSet::Original:
      return "original";
    case NameSet::Vocabulary:
      return "vocabulary";
    case NameSet::GivenNames:
      return "given-names";
  }
  return "single-token";
}

const std::vector<NeedleTemplate>& needle_wordings(NeedleSplit split) {
  static const std::vector<NeedleTemplate> train(std::begin(kTrainWordings), std::end(kTrainWordings));
  static const std::vector<NeedleTemplate> eval(std::begin(kEvalWordings), std::end(kEvalWordings));
  return split == NeedleSplit::Train ? train : eval;
}

const std::vector<NeedleTemplate>& wide_needle_wordings() {
  static const std::vector<NeedleTemplate> wide = [] {
    std::vector<NeedleTemplate> w(std::begin(kTrainWordings), std::end(kTrainWordings));
    w.insert(w.end(), std::begin(kWideWordings), std::end(kWideWordings));
    return w;
  }();
  return wide;
}

const std::vector<NeedleTemplate>& wider_needle_wordings() {
  static const std::vector<NeedleTemplate> wider = [] {
    std::vector<NeedleTemplate> w = wide_needle_wordings();
    w.insert(w.end(), std::begin(kWiderWordings), std::end(kWiderWordings));
    return w;
  }();
  return wider;
}

const std::vector<NeedleTemplate>& noun_needle_wordings() {
  static const std::vector<NeedleTemplate> nouns = [] {
    std::vector<NeedleTemplate> w = wider_needle_wordings();
    w.insert(w.end(), std::begin(kNounWordings), std::end(kNounWordings));
    return w;
  }();
  return nouns;
}

const std::vector<std::string>& given_names(NeedleSplit split) {
  static const std::vector<std::string> eval(std::begin(kGivenNamesEval), std::end(kGivenNamesEval));
  static const std::vector<std::string> train = [] {
    std::set<std::string> out(eval.begin(), eval.end());
    for (const std::string& n : needle_names(NeedleSplit::Eval, NameSet::SingleToken)) out.insert(n);
    std::vector<std::string> t;
    for (const char* n : kGivenNamesTrain)
      if (!out.count(n) && std::find(t.begin(), t.end(), n) == t.end()) t.push_back(n);
    return t;
  }();
  return split == NeedleSplit::Train ? train : eval;
}

int key_pieces(const Tokenizer& tokenizer, const std::string& key) {
  return static_cast<int>(tokenizer.encode("of " + key + " is", false).ids.size()) - 2;
}

// Every fourth name of a list is held out for evaluation.
const std::vector<std::string>& needle_names(NeedleSplit split, NameSet set) {
  using Lists = std::pair<std::vector<std::string>, std::vector<std::string>>;
  auto split_list = [](const char* const* names, size_t n) {
    Lists l;
    for (size_t i = 0; i < n; ++i) (i % 4 == 3 ? l.second : l.first).push_back(names[i]);
    return l;
  };
  static const Lists original = split_list(kOriginalNames, std::size(kOriginalNames));
  static const Lists single = split_list(kSingleTokenNames, std::size(kSingleTokenNames));
  if (set == NameSet::Vocabulary && split == NeedleSplit::Train)
    throw Error("the vocabulary's training keys depend on the tokenizer (EpisodeBuilder::keys())");
  const Lists& l = set == NameSet::Original ? original : single;  // Vocabulary evaluates on SingleToken's
  return split == NeedleSplit::Train ? l.first : l.second;
}

std::vector<std::string> vocabulary_keys(const Tokenizer& tokenizer, const NeedleTemplate& wording) {
  std::set<std::string> excluded(std::begin(kFunctionWords), std::end(kFunctionWords));
  for (const std::string& name : needle_names(NeedleSplit::Eval, NameSet::SingleToken)) excluded.insert(name);
  add_wording_words(excluded, wording);
  const std::string space = "\xE2\x96\x81";  // SentencePiece's word-start mark, U+2581
  std::vector<std::string> keys;
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string piece = tokenizer.piece(id);
    if (piece.size() < space.size() + 3 || piece.compare(0, space.size(), space) != 0) continue;
    const std::string word = piece.substr(space.size());
    bool shape = word[0] >= 'A' && word[0] <= 'Z';
    for (size_t k = 1; shape && k < word.size(); ++k) shape = word[k] >= 'a' && word[k] <= 'z';
    if (!shape || excluded.count(word)) continue;
    // Kept whole where a needle puts it: "of <key> is" is three pieces.
    if (tokenizer.encode("of " + word + " is", false).ids.size() != 3) continue;
    keys.push_back(word);
  }
  return keys;
}

bool code_in_split(int code, NeedleSplit split) {
  return (code % 7 == 0) == (split == NeedleSplit::Eval);
}

Haystack::Haystack(const std::string& text, const Tokenizer& tokenizer) {
  size_t start = 0;
  auto flush = [&](size_t end) {
    size_t b = start, e = end;
    while (b < e && (text[b] == ' ' || text[b] == '\n')) ++b;
    while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\n')) --e;
    if (e - b >= 2) sentences_.push_back(text.substr(b, e - b));
    start = end;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\n')
      flush(i + 1);
    else if ((text[i] == '.' || text[i] == '?' || text[i] == '!') && i + 1 < text.size() &&
             text[i + 1] == ' ')
      flush(i + 1);
  }
  flush(text.size());
  if (sentences_.empty()) throw Error("haystack: the text has no sentences");
  tokens_.reserve(sentences_.size());
  for (const auto& s : sentences_)
    tokens_.push_back(static_cast<int64_t>(tokenizer.encode(s, false).ids.size()));
}

namespace {

size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

// Replaces {name} and {code}; `code_at` receives where the code starts in the result (npos if absent).
std::string fill(const std::string& t, const Needle& n, size_t* code_at = nullptr) {
  std::string out;
  if (code_at) *code_at = std::string::npos;
  for (size_t i = 0; i < t.size();) {
    if (t.compare(i, 6, "{name}") == 0) {
      out += n.name;
      i += 6;
    } else if (t.compare(i, 6, "{code}") == 0) {
      if (code_at) *code_at = out.size();
      out += n.code;
      i += 6;
    } else {
      out += t[i++];
    }
  }
  return out;
}

// NameSet::GivenNames keys (see there). `names` receives how many leading keys are given names.
std::vector<std::string> given_name_keys(const Tokenizer& tokenizer, NeedleSplit split, size_t* names) {
  std::vector<std::string> keys;
  if (split == NeedleSplit::Eval) {
    for (const std::string& n : given_names(NeedleSplit::Eval)) {
      const int pieces = key_pieces(tokenizer, n);
      if (pieces >= 3 && pieces <= 4) keys.push_back(n);
    }
    *names = keys.size();
    return keys;
  }
  for (const std::string& n : given_names(NeedleSplit::Train)) {
    const int pieces = key_pieces(tokenizer, n);
    if (pieces >= 1 && pieces <= 4) keys.push_back(n);
  }
  *names = keys.size();
  std::set<std::string> taken(keys.begin(), keys.end());
  for (const std::string& n : given_names(NeedleSplit::Eval)) taken.insert(n);
  for (const std::string& n : needle_names(NeedleSplit::Eval, NameSet::SingleToken)) taken.insert(n);
  // Words: the Vocabulary pool (for every training wording), then the tokenizer's lower-case word pieces
  // capitalised, kept at two to four pieces ("River" is "_R iver"); function words and the wordings' words
  // are never keys.
  std::set<std::string> excluded(std::begin(kFunctionWords), std::end(kFunctionWords));
  for (const NeedleTemplate& w : needle_wordings(NeedleSplit::Train))
    for (const std::string& k : vocabulary_keys(tokenizer, w))
      if (!taken.count(k) && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  for (const auto* list : {&needle_wordings(NeedleSplit::Train), &needle_wordings(NeedleSplit::Eval)})
    for (const NeedleTemplate& w : *list) add_wording_words(excluded, w);
  const std::string space = "\xE2\x96\x81";  // SentencePiece's word-start mark, U+2581
  std::set<std::string> seen(keys.begin(), keys.end());
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string piece = tokenizer.piece(id);
    if (piece.size() < space.size() + 4 || piece.compare(0, space.size(), space) != 0) continue;
    const std::string word = piece.substr(space.size());
    if (word.find_first_not_of("abcdefghijklmnopqrstuvwxyz") != std::string::npos) continue;
    const std::string key = capitalised(word);
    if (excluded.count(key) || taken.count(key) || seen.count(key)) continue;
    const int pieces = key_pieces(tokenizer, key);
    if (pieces < 2 || pieces > 4) continue;
    seen.insert(key);
    keys.push_back(key);
  }
  return keys;
}

}  // namespace

void NeedleTemplate::validate() const {
  for (const auto& [field, text] :
       {std::pair<const char*, const std::string&>{"needle", needle}, {"question", question}}) {
    size_t known = occurrences(text, "{name}") + occurrences(text, "{code}");
    if (occurrences(text, "{") != known)
      throw Error(std::string("needle template: the ") + field + " may only use {name} and {code}");
    if (text.find_first_not_of(" \t\n") == std::string::npos)
      throw Error(std::string("needle template: the ") + field + " is empty");
  }
  if (occurrences(needle, "{code}") != 1)
    throw Error("needle template: the needle must hold {code} exactly once");
  if (occurrences(needle, "{name}") < 1)
    throw Error("needle template: the needle must name the person ({name})");
  if (occurrences(question, "{name}") < 1) throw Error("needle template: the question must hold {name}");
  if (occurrences(question, "{code}") != 0)
    throw Error("needle template: the question must not hold {code} (the answer follows it)");
}

EpisodeBuilder::EpisodeBuilder(const Haystack& haystack, const Tokenizer& tokenizer, NeedleSplit split,
                               NameSet names, NeedleTemplate wording, double zipf_fraction)
    : haystack_(haystack),
      tokenizer_(tokenizer),
      split_(split),
      names_(names),
      wordings_{std::move(wording)},
      zipf_fraction_(zipf_fraction) {
  wordings_.front().validate();
  if (!(zipf_fraction >= 0 && zipf_fraction <= 1)) throw Error("zipf_fraction must lie in [0, 1]");
  if (names == NameSet::Vocabulary && split == NeedleSplit::Train) {
    keys_ = vocabulary_keys(tokenizer, wordings_.front());
    if (keys_.size() < 16)
      throw Error("vocabulary keys: the tokenizer keeps only " + std::to_string(keys_.size()) +
                  " capitalised words as one piece (16 needed; use single-token names)");
  } else if (names == NameSet::GivenNames) {
    keys_ = given_name_keys(tokenizer, split, &name_keys_);
    if (name_keys_ < 8 || (split == NeedleSplit::Train && keys_.size() - name_keys_ < 8))
      throw Error("given-name keys: this tokenizer leaves " + std::to_string(name_keys_) + " names and " +
                  std::to_string(keys_.size() - name_keys_) +
                  " words of the lengths asked (8 of each needed)");
  } else {
    keys_ = needle_names(split, names);
  }
  zipf_cumulative_ = zipf_cumulative(keys_.size());
}

void EpisodeBuilder::set_wordings(std::vector<NeedleTemplate> wordings) {
  if (wordings.empty()) throw Error("needle wordings: the list is empty");
  for (const NeedleTemplate& w : wordings) w.validate();
  wordings_ = std::move(wordings);
  // A wording's own words are never keys ("Keep" as a name in "Keep in mind that Keep's number is 41."). The
  // pools already leave out the six training wordings' words, so those lists do not change.
  if (names_ != NameSet::GivenNames && names_ != NameSet::Vocabulary) return;
  std::set<std::string> words;
  for (const NeedleTemplate& w : wordings_) add_wording_words(words, w);
  std::vector<std::string> kept;
  size_t names = 0;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (words.count(keys_[i])) continue;
    if (i < name_keys_) ++names;
    kept.push_back(keys_[i]);
  }
  if (kept.size() == keys_.size()) return;
  if (kept.size() < 16) throw Error("needle wordings: they leave fewer than 16 keys");
  keys_ = std::move(kept);
  name_keys_ = names;
  zipf_cumulative_ = zipf_cumulative(keys_.size());
}

void EpisodeBuilder::set_code_digits(int min, int max) {
  if (min < 1 || max < min || max > 9)
    throw Error("code digits must be MIN-MAX with 1 <= MIN <= MAX <= 9 (got " + std::to_string(min) + "-" +
                std::to_string(max) + ")");
  code_min_ = min;
  code_max_ = max;
}

std::string EpisodeBuilder::needle_sentence(const Needle& n) const {
  return fill(wordings_[static_cast<size_t>(n.wording) % wordings_.size()].needle, n);
}

std::string EpisodeBuilder::question(const Needle& n) const {
  return fill(wordings_[static_cast<size_t>(n.question_wording) % wordings_.size()].question, n);
}

Needle EpisodeBuilder::random_needle(std::mt19937_64& rng, const std::vector<Needle>& taken,
                                     const std::vector<std::string>* avoid) const {
  Needle n;
  auto used = [&](const std::string& name) {
    return std::any_of(taken.begin(), taken.end(), [&](const Needle& t) { return t.name == name; }) ||
           (avoid && std::find(avoid->begin(), avoid->end(), name) != avoid->end());
  };
  bool found = false;
  for (int tries = 0; tries < 1000 && !found; ++tries) {
    size_t at;
    // The coin is tossed only when some draws are weighted, so that unweighted draws (evaluation, the
    // earlier name sets) take the random numbers they always took.
    if (zipf_fraction_ > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < zipf_fraction_) {
      const double u = std::uniform_real_distribution<double>(0, zipf_cumulative_.back())(rng);
      at = std::min<size_t>(
          static_cast<size_t>(std::upper_bound(zipf_cumulative_.begin(), zipf_cumulative_.end(), u) -
                              zipf_cumulative_.begin()),
          keys_.size() - 1);
    } else if (name_keys_ > 0 && name_keys_ < keys_.size()) {  // given names and words, half each
      at = std::uniform_real_distribution<double>(0, 1)(rng) < 0.5
               ? std::uniform_int_distribution<size_t>(0, name_keys_ - 1)(rng)
               : std::uniform_int_distribution<size_t>(name_keys_, keys_.size() - 1)(rng);
    } else {
      at = std::uniform_int_distribution<size_t>(0, keys_.size() - 1)(rng);
    }
    n.name = keys_[at];
    found = !used(n.name);
  }
  if (!found && avoid) {  // few keys left unused: look for one in order
    for (const std::string& k : keys_)
      if (!used(k)) {
        n.name = k;
        found = true;
        break;
      }
    if (!found) throw Error("episode: every key is already used in this row");
  }
  if (code_min_ == 4 && code_max_ == 4) {  // the earlier recipes' draw
    int code;
    do code = std::uniform_int_distribution<int>(1000, 9999)(rng);
    while (!code_in_split(code, split_));
    n.code = four_digits(code);
  } else {
    const int digits = std::uniform_int_distribution<int>(code_min_, code_max_)(rng);
    int64_t lo = 1;
    for (int d = 1; d < digits; ++d) lo *= 10;
    const int64_t first = digits == 1 ? 0 : lo, last = lo * 10 - 1;
    int64_t code;
    do code = std::uniform_int_distribution<int64_t>(first, last)(rng);
    while ((code % 7 == 0) != (split_ == NeedleSplit::Eval));
    n.code = std::to_string(code);
  }
  if (wordings_.size() > 1) {
    n.wording = std::uniform_int_distribution<int>(0, static_cast<int>(wordings_.size()) - 1)(rng);
    n.question_wording = std::uniform_int_distribution<int>(0, static_cast<int>(wordings_.size()) - 1)(rng);
  }
  return n;
}

Episode EpisodeBuilder::build(const EpisodeSpec& spec, std::mt19937_64& rng) const {
  if (spec.needles < 1 || spec.queried < 1 || spec.queried > spec.needles)
    throw Error("episode: need 1 <= queried (" + std::to_string(spec.queried) + ") <= needles (" +
                std::to_string(spec.needles) + ")");
  if (!spec.depths.empty() && static_cast<int>(spec.depths.size()) != spec.needles)
    throw Error("episode: give one depth per needle");
  if (spec.needles > static_cast<int>(keys_.size())) throw Error("episode: too many needles");
  Episode ep;
  std::vector<Needle> needles;
  for (int i = 0; i < spec.needles; ++i) needles.push_back(random_needle(rng, needles, spec.avoid));
  std::vector<double> depths = spec.depths;
  if (depths.empty())
    for (int i = 0; i < spec.needles; ++i)
      depths.push_back(std::uniform_real_distribution<double>(0, 1)(rng));
  for (double d : depths)
    if (!(d >= 0 && d <= 1)) throw Error("episode: depths must lie in [0, 1]");
  std::vector<int> order(static_cast<size_t>(spec.needles));  // needle indices sorted by depth
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return depths[a] < depths[b]; });
  std::vector<int> queried(order.begin(), order.end());
  if (spec.ask.empty()) {
    std::shuffle(queried.begin(), queried.end(), rng);
    queried.resize(static_cast<size_t>(spec.queried));
  } else {
    if (static_cast<int>(spec.ask.size()) != spec.queried)
      throw Error("episode: give one index per question");
    for (int i : spec.ask)
      if (i < 0 || i >= spec.needles)
        throw Error("episode: asked needle " + std::to_string(i) + " does not exist");
    queried = spec.ask;
  }

  int64_t fixed = 1;  // BOS
  for (const auto& n : needles)
    fixed += static_cast<int64_t>(tokenizer_.encode(needle_sentence(n), false).ids.size()) + 1;
  for (int q : queried)
    fixed += static_cast<int64_t>(
                 tokenizer_.encode(question(needles[q]) + " " + needles[q].code + ".", false).ids.size()) +
             2;
  const int64_t context = spec.haystack_tokens >= 0 ? fixed + spec.haystack_tokens : spec.context_tokens;
  int64_t budget = context - fixed;
  if (budget < 0)
    throw Error("episode: a context of " + std::to_string(spec.context_tokens) + " tokens cannot hold " +
                std::to_string(spec.needles) + " needles and " + std::to_string(spec.queried) + " questions");

  size_t start = std::uniform_int_distribution<size_t>(0, haystack_.size() - 1)(rng);
  // Consecutive sentences from `from` within `room` tokens; one that does not fit is skipped (a long
  // sentence must not leave a short context empty), and the scan stops once little room is left.
  auto gather = [&](size_t from, int64_t room) {
    std::vector<size_t> hay;
    int64_t used = 0;
    for (size_t k = 0; k < haystack_.size() && room - used > 4 && k < 4096; ++k) {
      const size_t i = (from + k) % haystack_.size();
      if (used + haystack_.tokens(i) > room) continue;
      used += haystack_.tokens(i);
      hay.push_back(i);
    }
    return hay;
  };
  // Sentence boundary k (0..|hay|) each needle goes before, and the largest distance between a needle's
  // placed and requested depth (fractions of the haystack's tokens).
  auto place = [&](const std::vector<size_t>& hay, std::vector<size_t>& boundary, std::vector<int64_t>& cum) {
    cum.assign(hay.size() + 1, 0);
    for (size_t k = 0; k < hay.size(); ++k) cum[k + 1] = cum[k] + haystack_.tokens(hay[k]);
    boundary.assign(needles.size(), 0);
    double worst = 0;
    for (size_t j = 0; j < needles.size(); ++j) {
      if (!spec.depth_by_tokens) {
        boundary[j] = static_cast<size_t>(std::lround(depths[j] * static_cast<double>(hay.size())));
        continue;
      }
      const double target = depths[j] * static_cast<double>(cum.back());
      size_t best = 0;
      for (size_t k = 1; k < cum.size(); ++k)
        if (std::fabs(static_cast<double>(cum[k]) - target) <
            std::fabs(static_cast<double>(cum[best]) - target))
          best = k;
      boundary[j] = best;
      if (cum.back() > 0)
        worst = std::max(
            worst, std::fabs(static_cast<double>(cum[best]) / static_cast<double>(cum.back()) - depths[j]));
    }
    return worst;
  };
  if (spec.depth_by_tokens) {  // a stretch of the haystack with a boundary near every requested depth
    std::vector<size_t> boundary;
    std::vector<int64_t> cum;
    double best_miss = place(gather(start, budget), boundary, cum);
    for (int tries = 0; tries < 32 && best_miss > kDepthTolerance; ++tries) {
      const size_t other = std::uniform_int_distribution<size_t>(0, haystack_.size() - 1)(rng);
      const double miss = place(gather(other, budget), boundary, cum);
      if (miss < best_miss) best_miss = miss, start = other;
    }
  }
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::vector<size_t> hay = gather(start, budget);
    // Needle j goes before haystack sentence boundary[j].
    std::string text;
    std::vector<std::pair<size_t, size_t>> needle_chars(needles.size()), code_chars(needles.size());
    std::vector<size_t> boundary;
    std::vector<int64_t> cum;
    place(hay, boundary, cum);
    size_t next = 0;
    auto put_needles_before = [&](size_t pos) {
      while (next < order.size() && boundary[static_cast<size_t>(order[next])] <= pos) {
        const Needle& n = needles[order[next]];
        if (!text.empty()) text += ' ';
        const size_t b = text.size();
        size_t code_at = 0;
        text += fill(wordings_[static_cast<size_t>(n.wording) % wordings_.size()].needle, n, &code_at);
        needle_chars[order[next]] = {b, text.size()};
        code_chars[order[next]] = {b + code_at, b + code_at + n.code.size()};
        ++next;
      }
    };
    for (size_t k = 0; k < hay.size(); ++k) {
      put_needles_before(k);
      if (!text.empty()) text += ' ';
      text += haystack_.sentence(hay[k]);
    }
    put_needles_before(hay.size());
    std::vector<std::pair<size_t, size_t>> question_chars, answer_chars;
    for (int q : queried) {
      text += '\n';
      const size_t b = text.size();
      text += question(needles[q]);
      question_chars.push_back({b, text.size()});
      text += ' ';
      answer_chars.push_back({text.size(), text.size() + needles[q].code.size()});
      text += needles[q].code + ".";
    }
    const Encoding enc = tokenizer_.encode(text, true);
    if (static_cast<int64_t>(enc.ids.size()) > context && !hay.empty()) {
      budget -= static_cast<int64_t>(enc.ids.size()) - context;  // shrink and try again
      continue;
    }
    ep.text = text;
    ep.ids = enc.ids;
    for (int j : order) {
      ep.needles.push_back(needles[j]);
      ep.needle_spans.push_back(token_span(enc, needle_chars[j].first, needle_chars[j].second));
      ep.needle_code_spans.push_back(token_span(enc, code_chars[j].first, code_chars[j].second));
      ep.depths.push_back(depths[j]);
      ep.placed_depths.push_back(
          cum.back() > 0 ? static_cast<double>(cum[boundary[j]]) / static_cast<double>(cum.back()) : 0.0);
    }
    for (size_t k = 0; k < queried.size(); ++k) {
      ep.queried.push_back(
          static_cast<int>(std::find(order.begin(), order.end(), queried[k]) - order.begin()));
      ep.question_spans.push_back(token_span(enc, question_chars[k].first, question_chars[k].second));
      ep.answer_spans.push_back(token_span(enc, answer_chars[k].first, answer_chars[k].second));
    }
    if (!spec.final_answer) {
      ep.ids.resize(static_cast<size_t>(ep.answer_spans.back().begin));
      ep.text.resize(answer_chars.back().first);
    }
    return ep;
  }
  throw Error("episode: could not fit the haystack into " + std::to_string(context) + " tokens");
}

void DataMix::validate() const {
  if (episode_fraction < 0 || drill_fraction < 0 || episode_fraction + drill_fraction > 1)
    throw Error("training mix: episode and drill fractions must be >= 0 and sum to at most 1");
  if (drill_needles_min < 1 || drill_needles_max < drill_needles_min)
    throw Error("training mix: drill_needles must be [min, max] with 1 <= min <= max (got [" +
                std::to_string(drill_needles_min) + ", " + std::to_string(drill_needles_max) + "])");
  if (drill_gap < 0) throw Error("training mix: drill_gap must be >= 0");
  if (episode_tokens_min < 32 || episode_tokens_max < episode_tokens_min)
    throw Error("training mix: episode_tokens must be [min, max] with 32 <= min <= max (got [" +
                std::to_string(episode_tokens_min) + ", " + std::to_string(episode_tokens_max) + "])");
  if (episode_needles < 1) throw Error("training mix: episode_needles must be >= 1");
  if (!(far_fraction >= 0 && far_fraction <= 1)) throw Error("training mix: far_fraction must lie in [0, 1]");
  if (!(far_depth >= 0 && far_depth <= 1)) throw Error("training mix: far_depth must lie in [0, 1]");
  if (!(zipf_fraction >= 0 && zipf_fraction <= 1))
    throw Error("training mix: zipf_fraction must lie in [0, 1]");
  if (wide_wording && !varied_wording)
    throw Error("training mix: wide_wording widens varied_wording; set varied_wording too");
  if (wider_wording && !wide_wording)
    throw Error("training mix: wider_wording widens wide_wording; set wide_wording too");
  if (noun_wording && !wider_wording)
    throw Error("training mix: noun_wording widens wider_wording; set wider_wording too");
  if (code_digits_min < 1 || code_digits_max < code_digits_min || code_digits_max > 9)
    throw Error("training mix: code_digits must be [min, max] with 1 <= min <= max <= 9 (got [" +
                std::to_string(code_digits_min) + ", " + std::to_string(code_digits_max) + "])");
}

TrainingData::TrainingData(std::vector<int64_t> stream, const Haystack& haystack, const Tokenizer& tokenizer,
                           DataMix mix)
    : stream_(std::move(stream)),
      episodes_(haystack, tokenizer, NeedleSplit::Train, mix.names, NeedleTemplate{},
                mix.names == NameSet::Vocabulary ? mix.zipf_fraction : 0.0),
      tokenizer_(tokenizer),
      mix_(mix) {
  if (stream_.size() < 1024)
    throw Error("training text is too short (" + std::to_string(stream_.size()) + " tokens)");
  mix.validate();
  if (mix.varied_wording)
    episodes_.set_wordings(mix.noun_wording    ? noun_needle_wordings()
                           : mix.wider_wording ? wider_needle_wordings()
                           : mix.wide_wording  ? wide_needle_wordings()
                                               : needle_wordings(NeedleSplit::Train));
  episodes_.set_code_digits(mix.code_digits_min, mix.code_digits_max);
  // What one needle costs a drill: its sentence, its question and answer, the spaces between, with the
  // pool's longest key (and, with several wordings, the longest of each).
  const std::string code(static_cast<size_t>(mix.code_digits_max), '1');
  const int w = static_cast<int>(episodes_.wordings().size());
  for (const std::string& key : episodes_.keys()) {
    int64_t needle = 0, question = 0;
    for (int k = 0; k < w; ++k) {
      const Needle n{key, code, k, k};
      needle = std::max<int64_t>(
          needle, static_cast<int64_t>(tokenizer.encode(episodes_.needle_sentence(n), false).ids.size()));
      question = std::max<int64_t>(
          question,
          static_cast<int64_t>(tokenizer.encode(episodes_.question(n) + " " + code + ".", false).ids.size()));
    }
    needle_tokens_ = std::max<int64_t>(needle_tokens_, needle + question + 2);
  }
}

TrainingRow TrainingData::text_row(int64_t length, std::mt19937_64& rng) const {
  TrainingRow r;
  const size_t n = static_cast<size_t>(length + 1);
  if (stream_.size() <= n) throw Error("training text is shorter than one sequence");
  const size_t start = std::uniform_int_distribution<size_t>(0, stream_.size() - n - 1)(rng);
  r.ids.assign(stream_.begin() + static_cast<std::ptrdiff_t>(start),
               stream_.begin() + static_cast<std::ptrdiff_t>(start + n));
  return r;
}

TrainingRow TrainingData::row(int64_t length, std::mt19937_64& rng) const {
  const double u = std::uniform_real_distribution<double>(0, 1)(rng);
  if (u < mix_.drill_fraction) return episode_row(length, rng, true);
  if (u < mix_.drill_fraction + mix_.episode_fraction) return episode_row(length, rng, false);
  return text_row(length, rng);
}

TrainingRow TrainingData::episode_row(int64_t length, std::mt19937_64& rng, bool drill) const {
  // Episodes until the row is full; what remains is natural text. No key comes twice in a row. Drills:
  // as many needles as the room left holds, within the mix's range; haystack episodes: a length within the
  // mix's range and the room left.
  const size_t n = static_cast<size_t>(length + 1);
  const bool varied_codes = mix_.code_digits_min != mix_.code_digits_max;
  TrainingRow r;
  for (int draws = 0; draws < 64 && r.ids.size() + 32 <= n; ++draws) {
    const int64_t room = static_cast<int64_t>(n - r.ids.size());
    EpisodeSpec spec;
    spec.avoid = &r.keys;
    spec.depth_by_tokens = false;  // as the bundled pair was trained
    Episode ep;
    bool built = false;
    if (drill) {
      // The largest count that fits with no haystack at all (BOS + the needles); then fewer until one fits
      // with its haystack draw.
      const int64_t fits = (room - 1) / std::max<int64_t>(1, needle_tokens_);
      const int most = static_cast<int>(std::min<int64_t>(mix_.drill_needles_max, fits));
      if (most < mix_.drill_needles_min) break;
      int needles = std::uniform_int_distribution<int>(mix_.drill_needles_min, most)(rng);
      for (; needles >= mix_.drill_needles_min && !built; --needles) {
        spec.needles = spec.queried = needles;
        const int64_t spare = room - 1 - needles * needle_tokens_;
        spec.haystack_tokens = std::uniform_int_distribution<int64_t>(
            0, std::max<int64_t>(0, std::min<int64_t>(int64_t{mix_.drill_gap} * needles, spare)))(rng);
        try {
          ep = episodes_.build(spec, rng);
          built = static_cast<int64_t>(ep.ids.size()) <= room;
        } catch (const Error&) {
        }
      }
    } else {
      if (room < mix_.episode_tokens_min) break;
      // The far draw is made only by a mix that asks for far episodes: older recipes keep their rows.
      const bool far =
          mix_.far_fraction > 0 && std::uniform_real_distribution<double>(0, 1)(rng) < mix_.far_fraction;
      if (far) {
        spec.context_tokens = std::min<int64_t>(room, mix_.episode_tokens_max);
        spec.needles = 1;
        spec.depths = {std::uniform_real_distribution<double>(0, mix_.far_depth)(rng)};
      } else {
        spec.context_tokens = std::uniform_int_distribution<int64_t>(
            mix_.episode_tokens_min, std::min<int64_t>(room, mix_.episode_tokens_max))(rng);
        spec.needles = std::uniform_int_distribution<int>(
            1, std::min(mix_.episode_needles, spec.context_tokens >= 160 ? 4 : 2))(rng);
      }
      spec.queried = spec.needles;
      try {
        ep = episodes_.build(spec, rng);
        built = static_cast<int64_t>(ep.ids.size()) <= room;
      } catch (const Error&) {
      }
    }
    if (!built) break;  // the room left is too small for this draw: fill with text
    const int64_t offset = static_cast<int64_t>(r.ids.size());
    r.ids.insert(r.ids.end(), ep.ids.begin(), ep.ids.end());
    for (const Span& a : ep.answer_spans)
      // Varied code lengths: the token after the code (its full stop) is an answer too.
      for (int64_t i = a.begin; i < a.end + (varied_codes ? 1 : 0); ++i)
        if (i < static_cast<int64_t>(ep.ids.size())) r.answers.push_back(offset + i);
    for (const Needle& nd : ep.needles) r.keys.push_back(nd.name);
    (drill ? r.drill_sizes : r.episode_sizes).push_back(static_cast<int>(ep.needles.size()));
  }
  r.filled = static_cast<int64_t>(std::min(r.ids.size(), n));
  if (r.ids.size() < n) {
    const TrainingRow fill = text_row(static_cast<int64_t>(n - r.ids.size()) - 1, rng);
    r.ids.insert(r.ids.end(), fill.ids.begin(), fill.ids.end());
  }
  r.ids.resize(n);
  return r;
}

}  // namespace difflens
