// Option tables: parsing, checking and usage text of the difflens command line.
#include "app/cli/options.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/formats/error.h"

namespace difflens::cli {

Option flag(std::string name, std::string help) {
  Option o;
  o.name = std::move(name);
  o.kind = Kind::Flag;
  o.help = std::move(help);
  return o;
}

Option repeatable(Option o) {
  o.repeatable = true;
  return o;
}

std::vector<std::string> Args::get_all(const std::string& name) const {
  const Option& o = spec(name, Kind::Text);
  if (!o.repeatable)
    throw std::logic_error("option --" + name + " is read as repeatable but its table says not");
  const auto it = repeated_.find(name);
  return it == repeated_.end() ? std::vector<std::string>{} : it->second;
}

Option text(std::string name, std::string value, std::string help, std::string fallback) {
  Option o;
  o.name = std::move(name);
  o.kind = Kind::Text;
  o.value = std::move(value);
  o.help = std::move(help);
  o.fallback = std::move(fallback);
  return o;
}

Option required(Option o) {
  o.required = true;
  return o;
}

Option defaulted(Option o, std::string fallback) {
  o.fallback = std::move(fallback);
  return o;
}

Option integer(std::string name, std::string value, double lo, double hi, std::string fallback,
               std::string help) {
  Option o = text(std::move(name), std::move(value), std::move(help), std::move(fallback));
  o.kind = Kind::Int;
  o.lo = lo;
  o.hi = hi;
  return o;
}

Option number(std::string name, std::string value, double lo, double hi, std::string fallback,
              std::string help) {
  Option o = integer(std::move(name), std::move(value), lo, hi, std::move(fallback), std::move(help));
  o.kind = Kind::Number;
  return o;
}

Option choice(std::string name, std::string words, std::string fallback, std::string help) {
  Option o = text(std::move(name), std::move(words), std::move(help), std::move(fallback));
  o.kind = Kind::Choice;
  return o;
}

Option int_list(std::string name, std::string value, double lo, double hi, int min_items, int max_items,
                std::string help) {
  Option o = integer(std::move(name), std::move(value), lo, hi, "", std::move(help));
  o.kind = Kind::IntList;
  o.min_items = min_items;
  o.max_items = max_items;
  return o;
}

Option size(std::string name, double lo, double hi, std::string fallback, std::string help) {
  Option o = integer(std::move(name), "WxH", lo, hi, std::move(fallback), std::move(help));
  o.kind = Kind::Size;
  return o;
}

std::vector<std::string> choice_words(const Option& o) {
  std::vector<std::string> words;
  size_t i = 0;
  while (i <= o.value.size()) {
    const size_t bar = std::min(o.value.find('|', i), o.value.size());
    words.push_back(o.value.substr(i, bar - i));
    i = bar + 1;
  }
  return words;
}

namespace {

std::string num(double v) {
  char buf[32];
  if (v == std::floor(v) && std::fabs(v) < 1e12)
    std::snprintf(buf, sizeof buf, "%.0f", v);  // whole numbers in full: 1000000, not 1e+06
  else
    std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// "a, b or c"
std::string listed(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i)
    out += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  return out;
}

std::string range_words(const Option& o, const char* what) {
  return std::string(what) + " from " + num(o.lo) + " to " + num(o.hi);
}

bool read_int(const std::string& s, double lo, double hi, long long& out) {
  try {
    size_t used = 0;
    out = std::stoll(s, &used);
    return used == s.size() && !s.empty() && out >= lo && out <= hi;
  } catch (const std::exception&) {
    return false;
  }
}

bool read_number(const std::string& s, double lo, double hi, double& out) {
  try {
    size_t used = 0;
    out = std::stod(s, &used);
    return used == s.size() && std::isfinite(out) && out >= lo && out <= hi;
  } catch (const std::exception&) {
    return false;
  }
}

// The items of an IntList, or an Error naming the flag and what is wrong.
std::vector<int> read_int_list(const Option& o, const std::string& s) {
  const std::string flag = "option --" + o.name;
  std::vector<int> out;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t comma = std::min(s.find(',', i), s.size());
    const std::string item = s.substr(i, comma - i);
    long long v = 0;
    if (item.empty()) throw Error(flag + ": an empty item in '" + s + "' (write " + o.value + ")");
    if (!read_int(item, -1e18, 1e18, v))
      throw Error(flag + " expects comma-separated integers (" + o.value + "), got '" + s + "'");
    if (v < o.lo || v > o.hi)
      throw Error(flag + ": each item is an integer from " + num(o.lo) + " to " + num(o.hi) + ", got '" +
                  item + "'");
    out.push_back(static_cast<int>(v));
    i = comma + 1;
  }
  const int n = static_cast<int>(out.size());
  if ((o.min_items && n < o.min_items) || (o.max_items && n > o.max_items)) {
    const std::string count = o.min_items == o.max_items ? std::to_string(o.min_items)
                              : o.max_items == 0
                                  ? std::to_string(o.min_items) + " or more"
                                  : std::to_string(o.min_items) + " to " + std::to_string(o.max_items);
    throw Error(flag + " expects " + o.value + " (" + count + " integers), got '" + s + "'");
  }
  return out;
}

std::pair<int, int> read_size(const Option& o, const std::string& s) {
  const size_t x = s.find('x');
  long long w = 0, h = 0;
  if (x == std::string::npos || !read_int(s.substr(0, x), o.lo, o.hi, w) ||
      !read_int(s.substr(x + 1), o.lo, o.hi, h))
    throw Error("option --" + o.name + " expects WIDTHxHEIGHT with each from " + num(o.lo) + " to " +
                num(o.hi) + " pixels, got '" + s + "'");
  return {static_cast<int>(w), static_cast<int>(h)};
}

// Throws when `value` is not what `o` takes.
void check(const Option& o, const std::string& value) {
  const std::string flag = "option --" + o.name;
  switch (o.kind) {
    case Kind::Flag:
    case Kind::Text:
      return;
    case Kind::Int: {
      long long v = 0;
      if (!read_int(value, o.lo, o.hi, v))
        throw Error(flag + " expects " + range_words(o, "an integer") + ", got '" + value + "'");
      return;
    }
    case Kind::Number: {
      double v = 0;
      if (!read_number(value, o.lo, o.hi, v))
        throw Error(flag + " expects " + range_words(o, "a number") + ", got '" + value + "'");
      return;
    }
    case Kind::Choice: {
      const std::vector<std::string> words = choice_words(o);
      if (std::find(words.begin(), words.end(), value) == words.end())
        throw Error(flag + " must be " + listed(words) + ", got '" + value + "'");
      return;
    }
    case Kind::IntList:
      (void)read_int_list(o, value);
      return;
    case Kind::Size:
      (void)read_size(o, value);
      return;
  }
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string help_hint(const Command& c) {
  return c.name.empty() ? "difflens --help" : "difflens " + c.name + " --help";
}

}  // namespace

std::string closest_option(const Command& command, const std::string& typed) {
  std::string best;
  size_t best_distance = 3;
  for (const Option& o : command.options) {
    const size_t d = edit_distance(typed, o.name);
    if (d < best_distance) {
      best_distance = d;
      best = o.name;
    }
  }
  return best;
}

Args::Args(const Command& command, int argc, char** argv, int first) : command_(&command) {
  parse(std::vector<std::string>(argv + std::min(first, argc), argv + argc));
}

Args::Args(const Command& command, const std::vector<std::string>& words) : command_(&command) {
  parse(words);
}

void Args::parse(const std::vector<std::string>& words) {
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    if (word.rfind("--", 0) != 0 || word.size() < 3)
      throw Error("unexpected argument '" + word + "' (options start with --; " + help_hint(*command_) +
                  " lists them)");
    std::string name = word.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const auto it = std::find_if(command_->options.begin(), command_->options.end(),
                                 [&](const Option& o) { return o.name == name; });
    if (it == command_->options.end()) {
      const std::string near = closest_option(*command_, name);
      throw Error("unknown option --" + name +
                  (command_->name.empty() ? std::string() : " for " + command_->name) +
                  (near.empty() ? "" : " (did you mean --" + near + "?)") + "; " + help_hint(*command_) +
                  " lists the options");
    }
    if (it->kind == Kind::Flag) {
      if (inline_value) throw Error("option --" + name + " takes no value");
      value = "1";
    } else if (!inline_value) {
      if (i + 1 >= words.size()) throw Error("option --" + name + " needs a value (" + it->value + ")");
      value = words[++i];
    }
    if (values_.count(name) && !it->repeatable) throw Error("option --" + name + " is given twice");
    check(*it, value);
    values_[name] = value;
    if (it->repeatable) repeated_[name].push_back(value);
  }
  for (const Option& o : command_->options)
    if (o.required && !has(o.name))
      throw Error("missing required option --" + o.name + " " + o.value + " (" + help_hint(*command_) + ")");
}

const Option& Args::spec(const std::string& name, Kind kind) const {
  for (const Option& o : command_->options)
    if (o.name == name) {
      if (o.kind != kind)
        throw std::logic_error("option --" + name + " is read as another kind than its table says");
      return o;
    }
  throw std::logic_error("option --" + name + " is read but not in the table of '" + command_->name + "'");
}

std::string Args::raw(const std::string& name) const {
  const auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  for (const Option& o : command_->options)
    if (o.name == name) return o.fallback;
  throw std::logic_error("option --" + name + " is read but not in the table of '" + command_->name + "'");
}

bool Args::has(const std::string& name) const {
  (void)raw(name);  // a name outside the table is a bug, even when asked about
  return values_.count(name) > 0;
}

bool Args::takes(const std::string& name) const {
  return std::any_of(command_->options.begin(), command_->options.end(),
                     [&](const Option& o) { return o.name == name; });
}

std::string Args::get(const std::string& name) const {
  return raw(name);
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  return has(name) ? raw(name) : fallback;
}

std::string Args::require(const std::string& name) const {
  const std::string v = raw(name);
  if (!has(name) || v.empty())
    throw Error("missing required option --" + name + " (" + help_hint(*command_) + ")");
  return v;
}

int Args::get_int(const std::string& name) const {
  const Option& o = spec(name, Kind::Int);
  const std::string v = raw(name);
  if (v.empty()) throw std::logic_error("option --" + name + " has no default: check has() first");
  long long out = 0;
  if (!read_int(v, o.lo, o.hi, out))
    throw std::logic_error("option --" + name + ": the table's default '" + v + "' is outside its range");
  return static_cast<int>(out);
}

int Args::get_int(const std::string& name, int fallback) const {
  spec(name, Kind::Int);
  return has(name) ? get_int(name) : fallback;
}

double Args::get_double(const std::string& name) const {
  const Option& o = spec(name, Kind::Number);
  const std::string v = raw(name);
  double out = 0;
  if (v.empty()) throw std::logic_error("option --" + name + " has no default: check has() first");
  if (!read_number(v, o.lo, o.hi, out))
    throw std::logic_error("option --" + name + ": the table's default '" + v + "' is outside its range");
  return out;
}

double Args::get_double(const std::string& name, double fallback) const {
  spec(name, Kind::Number);
  return has(name) ? get_double(name) : fallback;
}

std::vector<int> Args::get_int_list(const std::string& name) const {
  const Option& o = spec(name, Kind::IntList);
  const std::string v = raw(name);
  return v.empty() ? std::vector<int>{} : read_int_list(o, v);
}

int Args::choice_index(const std::string& name) const {
  const Option& o = spec(name, Kind::Choice);
  const std::vector<std::string> words = choice_words(o);
  const auto it = std::find(words.begin(), words.end(), raw(name));
  if (it == words.end())
    throw std::logic_error("option --" + name + " has no valid default: check has() first");
  return static_cast<int>(it - words.begin());
}

std::pair<int, int> Args::get_size(const std::string& name) const {
  const Option& o = spec(name, Kind::Size);
  const std::string v = raw(name);
  if (v.empty()) throw std::logic_error("option --" + name + " has no default: check has() first");
  return read_size(o, v);
}

namespace {

// Appends `words` to `out`, wrapped at `width` columns with continuation lines indented by `indent`.
void wrap(std::string& out, const std::string& words, size_t column, size_t indent, size_t width) {
  size_t i = 0;
  while (i < words.size()) {
    size_t end = words.find(' ', i);
    if (end == std::string::npos) end = words.size();
    const size_t len = end - i;
    if (column > indent && column + 1 + len > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
    } else if (column > indent) {
      out += ' ';
      ++column;
    }
    out += words.substr(i, len);
    column += len;
    i = end + 1;
  }
}

}  // namespace

std::string option_help(const Option& o) {
  std::string help = o.help;
  if (o.kind == Kind::Number || (o.kind == Kind::Int && o.hi <= 1000))
    help += " (" + num(o.lo) + " to " + num(o.hi) + ")";
  if (o.required) help += " (required)";
  if (o.repeatable) help += " (repeatable)";
  if (!o.fallback.empty()) {
    std::string shown;  // a default with a newline shows it as typed: \n
    for (char ch : o.fallback) shown += ch == '\n' ? std::string("\\n") : std::string(1, ch);
    help += " [default " + shown + "]";
  }
  return help;
}

std::string command_usage(const Command& c) {
  std::string out = c.name.empty() ? "usage: difflens [options]   (the desktop app)\n"
                                   : "usage: difflens " + c.name + " [options]\n";
  out += "\n";
  wrap(out, c.summary, 0, 0, 100);
  out += "\n\noptions:\n";
  constexpr size_t kHelpColumn = 28, kWidth = 100;
  for (const Option& o : c.options) {
    std::string head = "  --" + o.name + (o.kind == Kind::Flag ? "" : " " + o.value);
    const std::string help = option_help(o);
    if (head.size() + 2 > kHelpColumn) {
      out += head + "\n" + std::string(kHelpColumn, ' ');
    } else {
      out += head + std::string(kHelpColumn - head.size(), ' ');
    }
    wrap(out, help, kHelpColumn, kHelpColumn, kWidth);
    out += "\n";
  }
  if (!c.notes.empty()) {
    out += "\n";
    wrap(out, c.notes, 0, 0, kWidth);
    out += "\n";
  }
  return out;
}

}  // namespace difflens::cli
