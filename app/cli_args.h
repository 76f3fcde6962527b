// Minimal command-line parsing: `difflens COMMAND [--key value | --flag]...`.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

namespace difflens::cli {

class Args {
 public:
  // `flags` are options that take no value. Throws difflens::Error on malformed input.
  Args(int argc, char** argv, int first, const std::set<std::string>& flags);
  bool has(const std::string& key) const;
  std::string get(const std::string& key, const std::string& fallback = "") const;
  std::string require(const std::string& key) const;
  int get_int(const std::string& key, int fallback) const;
  // Numbers checked by kind and range; the message names the flag and the range ("--lr expects a number
  // from 1e-08 to 10, got 'abc'").
  int get_int(const std::string& key, int fallback, int lo, int hi) const;
  double get_double(const std::string& key, double fallback, double lo, double hi) const;
  std::vector<int> get_int_list(const std::string& key) const;  // "1,2,3"; empty when absent
  // Throws when an option not in `known` was given (catches typos such as --promt).
  void reject_unknown(const std::set<std::string>& known) const;

 private:
  std::map<std::string, std::string> values_;
};

}  // namespace difflens::cli
