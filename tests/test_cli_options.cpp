// The command line's option tables: how values are read and refused, and that every command's table is
// consistent, so that usage, rejection and parsing cannot drift apart.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <stdexcept>

#include "app/cli/commands.h"
#include "app/cli/options.h"
#include "core/formats/error.h"

using namespace difflens;
using namespace difflens::cli;

namespace {

Command sample() {
  return {"sample",
          "a command for tests",
          {required(text("out", "DIR", "where")), flag("fast", "go fast"),
           integer("n", "N", 1, 10, "3", "how many"), number("rate", "R", 0, 1, "0.5", "a share"),
           choice("mode", "a|b|c", "b", "which"), int_list("span", "B,E", 0, 100, 2, 2, "a span"),
           size("size", 100, 200, "", "a size"), integer("bare", "N", 0, 5, "", "no default")},
          "",
          nullptr};
}

// The message of the Error that parsing `words` throws ("" when none).
std::string refusal(const Command& c, const std::vector<std::string>& words) {
  try {
    Args a(c, words);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("cli options: values are read by kind, defaults come from the table", "[cli][options]") {
  const Command c = sample();
  const Args a(c, {"--out", "o", "--n=7", "--rate", "0.25", "--mode", "c", "--span", "4,9", "--size",
                   "120x199", "--fast"});
  CHECK(a.get("out") == "o");
  CHECK(a.has("fast"));
  CHECK(a.get_int("n") == 7);
  CHECK(a.get_double("rate") == 0.25);
  CHECK(a.get("mode") == "c");
  CHECK(a.choice_index("mode") == 2);
  CHECK(a.get_int_list("span") == std::vector<int>{4, 9});
  CHECK(a.get_size("size") == std::pair<int, int>{120, 199});
  CHECK(a.get_int("bare", -1) == -1);  // not given: the caller's fallback
  const Args d(c, {"--out", "o"});
  CHECK_FALSE(d.has("fast"));
  CHECK_FALSE(d.has("n"));
  CHECK(d.get_int("n") == 3);  // the table's default
  CHECK(d.get_double("rate") == 0.5);
  CHECK(d.choice_index("mode") == 1);
  CHECK(d.get_int_list("span").empty());
  CHECK(d.get_int("n", 9) == 9);  // a fallback given by the caller wins over the table's when not typed
}

TEST_CASE("cli options: bad values are refused with the flag named", "[cli][options][errors]") {
  const Command c = sample();
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"--n", "3"}, "missing required option --out DIR"},
      {{"--out", "o", "--n", "abc"}, "option --n expects an integer from 1 to 10, got 'abc'"},
      {{"--out", "o", "--n", "11"}, "option --n expects an integer from 1 to 10, got '11'"},
      {{"--out", "o", "--n", "2.5"}, "option --n expects an integer from 1 to 10, got '2.5'"},
      {{"--out", "o", "--n", ""}, "option --n expects an integer from 1 to 10, got ''"},
      {{"--out", "o", "--rate", "1.5"}, "option --rate expects a number from 0 to 1, got '1.5'"},
      {{"--out", "o", "--rate", "nan"}, "option --rate expects a number from 0 to 1, got 'nan'"},
      {{"--out", "o", "--rate", "0.5x"}, "option --rate expects a number from 0 to 1, got '0.5x'"},
      {{"--out", "o", "--mode", "d"}, "option --mode must be a, b or c, got 'd'"},
      {{"--out", "o", "--span", "1"}, "option --span expects B,E (2 integers), got '1'"},
      {{"--out", "o", "--span", "1,,2"}, "option --span: an empty item in '1,,2' (write B,E)"},
      {{"--out", "o", "--span", "1,x"}, "option --span expects comma-separated integers (B,E), got '1,x'"},
      {{"--out", "o", "--span", "1,101"}, "option --span: each item is an integer from 0 to 100, got '101'"},
      {{"--out", "o", "--size", "99x150"}, "option --size expects WIDTHxHEIGHT with each from 100 to 200"},
      {{"--out", "o", "--size", "150"}, "option --size expects WIDTHxHEIGHT"},
      {{"--out", "o", "--fast=1"}, "option --fast takes no value"},
      {{"--out", "o", "--n"}, "option --n needs a value (N)"},
      {{"--out", "o", "--n", "1", "--n", "2"}, "option --n is given twice"},
      {{"--out", "o", "--nn", "1"}, "unknown option --nn for sample (did you mean --n?)"},
      {{"--out", "o", "--colour", "1"}, "unknown option --colour for sample; difflens sample --help lists"},
      {{"--out", "o", "stray"}, "unexpected argument 'stray'"},
  };
  for (const auto& [words, message] : cases) {
    INFO(message);
    CHECK_THAT(refusal(c, words), Catch::Contains(message));
  }
}

TEST_CASE("cli options: reading an option the table lacks, or as another kind, is a programming error",
          "[cli][options]") {
  const Command c = sample();
  const Args a(c, {"--out", "o"});
  CHECK_THROWS_AS(a.get("nope"), std::logic_error);
  CHECK_THROWS_AS(a.has("nope"), std::logic_error);
  CHECK_THROWS_AS(a.get_int("rate"), std::logic_error);  // a Number read as an Int
  CHECK_THROWS_AS(a.get_int("bare"), std::logic_error);  // no default and not given: check has() first
  CHECK_THROWS_AS(a.get_double("n"), std::logic_error);
  CHECK(a.takes("span"));
  CHECK_FALSE(a.takes("nope"));
}

TEST_CASE("cli options: every command's table is consistent and its usage lists each option once",
          "[cli][options]") {
  std::vector<Command> commands = all_commands();
  commands.push_back(gui_command());
  std::set<std::string> command_names;
  for (const Command& c : commands) {
    INFO("command '" << c.name << "'");
    CHECK(command_names.insert(c.name).second);
    CHECK(c.run != nullptr);
    CHECK_FALSE(c.summary.empty());
    const std::string usage = command_usage(c);
    std::set<std::string> names;
    for (const Option& o : c.options) {
      INFO("--" << o.name);
      CHECK(names.insert(o.name).second);  // no option twice
      CHECK_FALSE(o.help.empty());
      CHECK((o.kind == Kind::Flag) == o.value.empty());
      CHECK_FALSE((o.required && !o.fallback.empty()));
      // The usage names it once, at the start of its line.
      const std::string head = "\n  --" + o.name + (o.kind == Kind::Flag ? "" : " ");
      const size_t at = usage.find(head);
      CHECK(at != std::string::npos);
      CHECK(usage.find(head, at + 1) == std::string::npos);
      if (o.kind == Kind::Flag || o.kind == Kind::Text) continue;
      // A default is a valid value of the option (a command with it typed is accepted by the same checks).
      std::vector<std::string> words;
      for (const Option& r : c.options)
        if (r.required) words.insert(words.end(), {"--" + r.name, "x"});
      if (!o.fallback.empty()) {
        std::vector<std::string> with = words;
        with.insert(with.end(), {"--" + o.name, o.fallback});
        CHECK(refusal(c, with).empty());
      }
      // A word is refused by every kind but Text, with the flag named.
      std::vector<std::string> bad = words;
      bad.insert(bad.end(), {"--" + o.name, "zz"});
      CHECK_THAT(refusal(c, bad), Catch::StartsWith("option --" + o.name));
      if (o.kind == Kind::Int || o.kind == Kind::Number) {
        CHECK(o.lo <= o.hi);
        for (double outside : {o.lo - 1, o.hi + 1}) {
          std::vector<std::string> out_of_range = words;
          char typed[40];
          std::snprintf(typed, sizeof typed, "%.17g", outside);
          out_of_range.insert(out_of_range.end(), {"--" + o.name, typed});
          CHECK_THAT(refusal(c, out_of_range), Catch::StartsWith("option --" + o.name + " expects"));
        }
      }
    }
  }
}

TEST_CASE("cli options: a mistyped option is answered with the nearest name", "[cli][options]") {
  const Command c = sample();
  CHECK(closest_option(c, "ot") == "out");
  CHECK(closest_option(c, "mdoe") == "mode");
  CHECK(closest_option(c, "sise") == "size");
  CHECK(closest_option(c, "completely-different") == "");
}
