// The command line's one description of each command: its options as a table (name, kind of value with
// its range or choices, default, one help line). Usage text, the refusal of unknown options, and the
// checking and reading of every value all come from that table, so adding an option is one row beside
// the code that reads it.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace difflens::cli {

enum class Kind {
  Flag,     // no value: present or not
  Text,     // any string (paths, prompts, lists read by core)
  Int,      // an integer within [lo, hi]
  Number,   // a finite number within [lo, hi]
  Choice,   // one of the words in `value` ("auto|cpu|cuda")
  IntList,  // comma-separated integers, each within [lo, hi], min_items..max_items of them
  Size,     // WIDTHxHEIGHT, each within [lo, hi]
};

struct Option {
  std::string name;  // without the leading "--"
  Kind kind = Kind::Text;
  std::string value;     // the placeholder in the usage ("DIR", "N"); a Choice's words separated by '|'
  std::string fallback;  // the default as it would be typed; empty: none (the usage then shows none)
  std::string help;      // what it does, one phrase
  double lo = 0, hi = 0;
  int min_items = 0, max_items = 0;  // IntList: how many items (0: no limit)
  bool required = false;
  bool repeatable = false;  // may be given more than once (Args::get_all reads every value, in order)
};

// Builders for the table rows, so a command's table reads as a list.
Option flag(std::string name, std::string help);
Option text(std::string name, std::string value, std::string help, std::string fallback = "");
Option required(Option o);                         // the command refuses to run without it
Option defaulted(Option o, std::string fallback);  // e.g. an IntList's default
Option repeatable(Option o);                       // --x A --x B: both kept, in order
Option integer(std::string name, std::string value, double lo, double hi, std::string fallback,
               std::string help);
Option number(std::string name, std::string value, double lo, double hi, std::string fallback,
              std::string help);
Option choice(std::string name, std::string words, std::string fallback, std::string help);
Option int_list(std::string name, std::string value, double lo, double hi, int min_items, int max_items,
                std::string help);
Option size(std::string name, double lo, double hi, std::string fallback, std::string help);

class Args;

struct Command {
  std::string name;     // empty: the desktop app (options without a command)
  std::string summary;  // one line for the list of commands
  std::vector<Option> options;
  std::string notes;  // lines printed after the options in `difflens COMMAND --help`
  int (*run)(const Args&) = nullptr;
};

// A command's arguments, read and checked against its table when constructed: unknown options, missing
// values, and values of the wrong kind or out of range throw difflens::Error naming the flag. Getters
// return the value given, else the table's default; asking for a name the table does not have is a
// programming error (std::logic_error).
class Args {
 public:
  Args(const Command& command, int argc, char** argv, int first);
  // For tests and tools: the same from a list of words ("--prompt", "hi", ...).
  Args(const Command& command, const std::vector<std::string>& words);

  bool has(const std::string& name) const;    // given on the command line
  bool takes(const std::string& name) const;  // the command's table has this option
  std::string get(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback) const;
  std::string require(const std::string& name) const;  // given and not empty, else an Error
  int get_int(const std::string& name) const;
  int get_int(const std::string& name, int fallback) const;  // fallback when not given
  double get_double(const std::string& name) const;
  double get_double(const std::string& name, double fallback) const;
  std::vector<int> get_int_list(const std::string& name) const;  // empty when not given
  // Every value of a repeatable option, in the order given (empty when not given).
  std::vector<std::string> get_all(const std::string& name) const;
  // A Choice's word, and its position among the table's words.
  int choice_index(const std::string& name) const;
  std::pair<int, int> get_size(const std::string& name) const;  // (width, height)
  const Command& command() const { return *command_; }

 private:
  void parse(const std::vector<std::string>& words);
  const Option& spec(const std::string& name, Kind kind) const;
  std::string raw(const std::string& name) const;  // given, else the default

  const Command* command_;
  std::map<std::string, std::string> values_;                 // the last value of each option given
  std::map<std::string, std::vector<std::string>> repeated_;  // repeatable options: every value
};

// An option's help as --help and the man page print it: the phrase, then its range, "(required)" and
// "[default ...]" where the table has them.
std::string option_help(const Option& option);
// `difflens COMMAND --help`: the summary, every option with its value, help and default, then the notes.
std::string command_usage(const Command& command);
// The words of a Choice ("auto|cpu|cuda" -> {"auto","cpu","cuda"}).
std::vector<std::string> choice_words(const Option& o);
// The closest name in the table to a mistyped one (edit distance at most 2), or "".
std::string closest_option(const Command& command, const std::string& typed);

}  // namespace difflens::cli
