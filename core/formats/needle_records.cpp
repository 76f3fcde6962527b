// The needle lab's plain records (core/formats/needle_records.h).
#include "core/formats/needle_records.h"

#include <cctype>
#include <cmath>
#include <map>
#include <tuple>

#include "core/formats/error.h"

namespace difflens {

Episode needle_episode(const EpisodeBuilder& builder, const NeedleCell& cell, uint64_t seed) {
  if (cell.queried < 1 || cell.queried > cell.needles)
    throw Error("needle lab: need 1 <= queried <= needles");
  if (cell.depth > 1) throw Error("needle lab: depths lie in [0, 1] (or < 0 for random)");
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(cell.length) * 131 +
                      static_cast<uint64_t>(cell.needles) * 7 + static_cast<uint64_t>(cell.queried));
  EpisodeSpec spec;
  spec.context_tokens = cell.length;
  spec.needles = cell.needles;
  spec.queried = cell.queried;
  // The asked needles (the first R) sit at the cell's depth, the others at random depths.
  std::uniform_real_distribution<double> u(0, 1);
  for (int i = 0; i < cell.needles; ++i)
    spec.depths.push_back(cell.depth >= 0 && i < cell.queried ? cell.depth : u(rng));
  for (int i = 0; i < cell.queried; ++i) spec.ask.push_back(i);
  return builder.build(spec, rng);
}

std::vector<NeedleCellSummary> summarize(const std::vector<NeedleRun>& runs) {
  std::map<std::tuple<int64_t, double, int, int>, NeedleCellSummary> cells;
  std::map<std::tuple<int64_t, double, int, int>, int> asked, answered;
  std::map<std::tuple<int64_t, double, int, int>, std::vector<double>> mass, output;
  for (const NeedleRun& r : runs) {
    const auto key = std::make_tuple(r.cell.length, r.cell.depth, r.cell.needles, r.cell.queried);
    NeedleCellSummary& s = cells[key];
    s.cell = r.cell;
    ++s.runs;
    s.attention.add(r.attention.mean, 1.0);
    s.answering.add(r.answering.mean, 1.0);
    if (const auto h = strongest_answer_head(r.answering)) s.answering_head += h->share.answer_mass;
    s.placed_depth += r.placed_depth;
    asked[key] += r.asked;
    answered[key] += r.answered;
    mass[key].push_back(r.attention.mean.noise_mass);
    output[key].push_back(r.attention.mean.noise_output);
  }
  std::vector<NeedleCellSummary> out;
  for (auto& [key, s] : cells) {
    AttentionShare attention, answering;
    attention.add(s.attention, 1.0 / s.runs);
    answering.add(s.answering, 1.0 / s.runs);
    s.attention = attention;
    s.answering = answering;
    s.answering_head /= s.runs;
    s.placed_depth /= s.runs;
    s.accuracy = asked[key] ? static_cast<double>(answered[key]) / asked[key] : 0.0;
    s.accuracy_ci = wilson_interval(answered[key], asked[key]);
    s.asked = asked[key];
    s.answered = answered[key];
    s.noise_mass_ci = bootstrap_mean(mass[key]);
    s.noise_output_ci = bootstrap_mean(output[key]);
    out.push_back(s);
  }
  return out;
}

AnsweringMean answering_over_depths(const std::vector<NeedleCellSummary>& cells, int64_t length, int needles,
                                    int queried) {
  AnsweringMean m;
  for (const auto& c : cells)
    if (c.cell.length == length && c.cell.needles == needles && c.cell.queried == queried) {
      m.share.add(c.answering, 1.0);
      m.strongest_head += c.answering_head;
      ++m.cells;
    }
  if (m.cells > 0) {
    AttentionShare mean;
    mean.add(m.share, 1.0 / m.cells);
    m.share = mean;
    m.strongest_head /= m.cells;
  }
  return m;
}

void validate(const NeedleSweep& sweep, int64_t max_positions) {
  if (sweep.lengths.empty()) throw Error("needle sweep: no context lengths");
  if (sweep.depths.empty()) throw Error("needle sweep: no depths");
  if (sweep.needles_queried.empty()) throw Error("needle sweep: no (needles, queried) combination");
  for (int64_t L : sweep.lengths) {
    if (L < 64)
      throw Error("needle sweep: context length " + std::to_string(L) + " must be at least 64 tokens");
    if (max_positions > 0 && L > max_positions)
      throw Error("needle sweep: context length " + std::to_string(L) + " exceeds the model's " +
                  std::to_string(max_positions) + " positions");
  }
  for (double d : sweep.depths)
    if (!(d >= 0 && d <= 1)) throw Error("needle sweep: depths are percentages in [0, 100]");
  for (const auto& [n, r] : sweep.needles_queried)
    if (n < 1 || n > 16 || r < 1 || r > n)
      throw Error("needle sweep: need 1 <= queried <= needles <= 16 (got N=" + std::to_string(n) +
                  ", R=" + std::to_string(r) + ")");
  if (sweep.seeds < 1) throw Error("needle sweep: seeds must be at least 1");
  if (sweep.first_seed < 1 || sweep.first_seed > 1000000)
    throw Error("needle sweep: the first seed must lie in 1..1000000");
  const double episodes = static_cast<double>(sweep.lengths.size()) *
                          static_cast<double>(sweep.depths.size()) *
                          static_cast<double>(sweep.needles_queried.size()) * sweep.seeds;
  if (episodes > 100000) throw Error("needle sweep: more than 100,000 episodes per model; shrink the grid");
}

std::vector<NeedleJob> expand(const NeedleSweep& sweep) {
  validate(sweep);
  std::vector<NeedleJob> jobs;
  for (int64_t L : sweep.lengths)
    for (const auto& [n, r] : sweep.needles_queried)
      for (double d : sweep.depths)
        for (int s = sweep.first_seed; s < sweep.first_seed + sweep.seeds; ++s)
          jobs.push_back({{L, d, n, r}, static_cast<uint64_t>(s)});
  return jobs;
}

namespace {

std::vector<double> numbers(const std::string& text, const char* field) {
  std::vector<double> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.erase(item.begin());
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    try {
      size_t used = 0;
      const double v = std::stod(item, &used);
      if (used != item.size() || !std::isfinite(v)) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw Error(std::string(field) + " expects comma-separated numbers, got '" + item + "'");
    }
    start = end + 1;
  }
  return out;
}

}  // namespace

NeedleSweep parse_needle_sweep(const std::string& lengths, const std::string& depths_percent,
                               const std::string& needles, const std::string& queried, int seeds,
                               int first_seed) {
  NeedleSweep sweep;
  sweep.lengths.clear();
  for (double L : numbers(lengths, "lengths")) {
    if (L != std::floor(L) || L < 64 || L > 1e9)
      throw Error("lengths: each length must be an integer of at least 64");
    sweep.lengths.push_back(static_cast<int64_t>(L));
  }
  sweep.depths.clear();
  for (double d : numbers(depths_percent, "depths")) {
    if (d < 0 || d > 100) throw Error("depths are percentages in [0, 100]");
    sweep.depths.push_back(d / 100.0);
  }
  sweep.needles_queried.clear();
  for (double n : numbers(needles, "needles"))
    for (double r : numbers(queried, "queried"))
      if (r >= 1 && r <= n && n <= 16 && n == std::floor(n) && r == std::floor(r))
        sweep.needles_queried.push_back({static_cast<int>(n), static_cast<int>(r)});
  if (sweep.needles_queried.empty())
    throw Error("needles/queried: no combination with 1 <= queried <= needles <= 16 (whole numbers)");
  sweep.seeds = seeds;
  sweep.first_seed = first_seed;
  validate(sweep);
  return sweep;
}

}  // namespace difflens
