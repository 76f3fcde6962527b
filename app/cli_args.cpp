// Command-line option parsing for the difflens CLI.
#include "app/cli_args.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace difflens::cli {

Args::Args(int argc, char** argv, int first, const std::set<std::string>& flags) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a.size() < 3)
      throw Error("unexpected argument '" + a + "' (options start with --)");
    std::string key = a.substr(2), value;
    const size_t eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (flags.count(key)) {
      value = "1";
    } else {
      if (i + 1 >= argc) throw Error("option --" + key + " needs a value");
      value = argv[++i];
    }
    values_[key] = value;
  }
}

bool Args::has(const std::string& key) const {
  return values_.count(key) > 0;
}

std::string Args::get(const std::string& key, const std::string& fallback) const {
  auto it = values_.find(key);
  return it == values_.end() ? fallback : it->second;
}

std::string Args::require(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end() || it->second.empty()) throw Error("missing required option --" + key);
  return it->second;
}

int Args::get_int(const std::string& key, int fallback) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  try {
    size_t used = 0;
    const int v = std::stoi(it->second, &used);
    if (used != it->second.size()) throw std::invalid_argument("trailing");
    return v;
  } catch (const std::exception&) {
    throw Error("option --" + key + " expects an integer, got '" + it->second + "'");
  }
}

int Args::get_int(const std::string& key, int fallback, int lo, int hi) const {
  const int v = get_int(key, fallback);
  if (has(key) && (v < lo || v > hi))
    throw Error("option --" + key + " expects an integer from " + std::to_string(lo) + " to " +
                std::to_string(hi) + ", got '" + get(key) + "'");
  return v;
}

double Args::get_double(const std::string& key, double fallback, double lo, double hi) const {
  auto it = values_.find(key);
  if (it == values_.end()) return fallback;
  double v = 0;
  bool ok = false;
  try {
    size_t used = 0;
    v = std::stod(it->second, &used);
    ok = used == it->second.size() && std::isfinite(v) && v >= lo && v <= hi;
  } catch (const std::exception&) {
  }
  if (!ok) {
    char range[96];
    std::snprintf(range, sizeof range, "a number from %g to %g", lo, hi);
    throw Error("option --" + key + " expects " + range + ", got '" + it->second + "'");
  }
  return v;
}

std::vector<int> Args::get_int_list(const std::string& key) const {
  std::vector<int> out;
  auto it = values_.find(key);
  if (it == values_.end()) return out;
  const std::string& s = it->second;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = s.find(',', i);
    const std::string part = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
    try {
      size_t used = 0;
      out.push_back(std::stoi(part, &used));
      if (used != part.size()) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      throw Error("option --" + key + " expects comma-separated integers, got '" + s + "'");
    }
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

void Args::reject_unknown(const std::set<std::string>& known) const {
  for (const auto& [k, v] : values_)
    if (!known.count(k)) throw Error("unknown option --" + k + " (see difflens --help)");
}

}  // namespace difflens::cli
