// `difflens batch`: a prompt set (JSON lines) run on every model given, models loaded once, items streamed
// (read a line at a time, results appended as each item ends), resumable; per item and per head, then a
// summary with 95 % intervals and paired tests between the models (core/model/batch.h, core/formats/stats.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common_options.h"
#include "app/cli/options.h"
#include "app/cli/paths.h"
#include "app/cli/run_support.h"
#include "app/reports/needle_report.h"
#include "app/reports/prompt_set.h"
#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "core/formats/model_dir.h"
#include "core/formats/patch_site.h"
#include "core/formats/stats.h"
#include "core/model/batch.h"
#include "viz/chart.h"
#include "viz/export.h"
#include "viz/figure.h"

namespace difflens::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using app::count_items;
using app::ItemReader;
using app::PromptSetWriter;
using app::StepModel;
using app::write_steps;

int cmd_batch(const Args& a) {
  apply_threads(a);
  const std::string items = a.require("items");
  const std::string out_arg = a.require("out");
  check_output_dir(out_arg, "--out");
  const fs::path out = out_arg;
  const bool resume = a.has("resume");
  if (!resume)  // refused before the models load (PromptSetWriter says it again, below)
    for (const char* f : {"items.jsonl", "items.csv", "heads.csv", "patch.csv"})
      if (fs::exists(out / f))
        throw Error("--out " + out_arg + ": " + f +
                    " is there already; give --resume to go on from it, or another --out");
  // DIFFLENS_QUICK (the docs test): the first 8 items only.
  const int64_t total = quick_cap("items", count_items(items), 8);
  if (total == 0) throw Error("--items " + items + ": no items (one JSON object a line)");
  std::vector<Model> models;
  std::vector<std::string> names;
  std::vector<StepModel> steps;               // --steps: what each model is
  std::map<std::string, std::string> run_of;  // --steps: a run's name -> its model folder (names unique)
  double step_bytes = 0;
  for (const std::string& dir : model_dirs(a)) {
    if (!a.has("steps")) {
      models.push_back(load_model(dir, device(a)));
      names.push_back(models.back().config().name.empty() ? dir : models.back().config().name);
      continue;
    }
    const KeptSteps kept = kept_steps(dir);
    if (kept.steps.empty())
      throw Error(
          "--steps: " + dir +
          " holds no kept steps (a model folder of a run that train --keep-every N made keeps them in "
          "checkpoints/step-N)");
    const fs::path run = kept.model;
    std::string run_name = (run.parent_path().filename() / run.filename()).string();
    for (int k = 2; run_of.count(run_name) && run_of[run_name] != run.string(); ++k)  // a/seed-1, b/seed-1
      run_name = (run.parent_path().filename() / run.filename()).string() + " (" + std::to_string(k) + ")";
    if (run_of.count(run_name))
      throw Error("--steps: " + dir + " is given twice (as a run or one of its steps)");
    run_of[run_name] = run.string();
    // Every kept step is a model loaded for the whole batch: refused before any is, when they would not fit.
    for (const auto& [step, folder] : kept.steps)
      for (const auto& e : fs::directory_iterator(folder))
        if (e.path().extension() == ".safetensors")
          step_bytes += static_cast<double>(fs::file_size(e.path()));
    if (const uint64_t avail = available_memory_bytes();
        avail > 0 && step_bytes > 0.5 * static_cast<double>(avail))
      throw Error("--steps: the kept steps' weights come to " +
                  std::to_string(static_cast<int64_t>(step_bytes / 1e6)) + " MB, loaded at once, and " +
                  std::to_string(avail / 1000000) +
                  " MB is available: give fewer runs at a time (or keep fewer steps)");
    for (const auto& [step, folder] : kept.steps) {
      models.push_back(load_model(folder.string(), device(a)));
      names.push_back(run_name + " step " + std::to_string(step));
      steps.push_back({folder.string(), run_name, step, models.back().config().attention});
    }
  }
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t k = 0; k < i; ++k)
      if (names[i] == names[k]) names[i] += " (" + std::to_string(i + 1) + ")";
  PromptSetWriter writer(out, resume, "--out " + out_arg);
  std::set<std::string> said;  // refusals of --intervene specs, printed once per model
  int64_t failed = 0, ran = 0, skipped = 0, n = 0;
  const bool tty = isatty(STDERR_FILENO);
  const auto t0 = std::chrono::steady_clock::now();
  std::signal(SIGINT, on_interrupt);
  ItemReader reader(items);
  std::string text;
  int64_t line = 0;
  while (n < total && reader.next(text, line)) {
    if (g_stop) break;
    ++n;
    for (size_t m = 0; m < models.size() && !g_stop; ++m) {
      // Specs a model cannot take (a baseline asked for λ) are left out for it, said once (as needle does).
      std::vector<std::string> refused;
      try {
        const auto outcome =
            writer.run(models[m], names[m], text, line, a.get_all("intervene"), refused, &g_stop);
        skipped += outcome == PromptSetWriter::Outcome::Skipped;
        ran += outcome == PromptSetWriter::Outcome::Written;
        failed += outcome == PromptSetWriter::Outcome::Failed;
      } catch (const Cancelled&) {
        break;  // Ctrl-C during a capture: this item is not written; --resume runs it
      }
      for (const std::string& why : refused)
        if (said.insert(names[m] + why).second)
          std::fprintf(stderr, "batch: %s: skipped (it runs without it): %s\n", names[m].c_str(),
                       why.c_str());
    }
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double rate = static_cast<double>(n) / std::max(el, 1e-9);
    const int eta = static_cast<int>(static_cast<double>(total - n) / std::max(rate, 1e-9));
    if (tty || n % 100 == 0 || n == total)
      std::fprintf(stderr, "%sitem %lld/%lld  %.1f items/s  ETA %dh%02dm%02ds  (%lld failed)%s",
                   tty ? "\r" : "", static_cast<long long>(n), static_cast<long long>(total), rate,
                   eta / 3600, eta / 60 % 60, eta % 60, static_cast<long long>(failed), tty ? "" : "\n");
  }
  if (tty) std::fprintf(stderr, "\n");
  json summary;
  const std::string md = writer.finish(names, &summary);
  const int64_t unpatched = writer.unpatched();
  std::printf("%s\n", md.c_str());
  if (!steps.empty()) write_steps(out, steps, names, summary);
  std::printf("batch: %lld items x %zu models: %lld ran, %lld done before (--resume), %lld failed%s%s%s\n",
              static_cast<long long>(n), models.size(), static_cast<long long>(ran),
              static_cast<long long>(skipped), static_cast<long long>(failed),
              unpatched ? (", " + std::to_string(unpatched) + " not patched").c_str() : "",
              failed || unpatched ? " (errors.csv says why)" : "",
              g_stop ? "; stopped (Ctrl-C): --resume goes on" : "");
  std::printf("wrote %s: items.jsonl, items.csv, heads.csv,%s summary.md, summary.json%s\n", out_arg.c_str(),
              fs::exists(out / "patch.csv") ? " patch.csv," : "",
              steps.empty() ? "" : ", steps.csv, steps.png, steps.svg");
  return failed > 0 || unpatched > 0 || g_stop ? 1 : 0;
}

}  // namespace

std::vector<Command> batch_commands() {
  return {
      {"batch",
       "run a prompt set (JSON lines: prompt, answer, ...) on every model: per item and head, and a summary with "
       "95 % intervals and paired tests",
       {required(text(
            "items", "FILE.jsonl",
            "the items, one JSON object a line: \"prompt\" (or \"token_ids\"), \"answer\", optional "
            "\"id\", \"answer_span\" [B,E], \"query\" [B,E], \"corrupt\" and \"corrupt_answer\" (activation "
            "patching) and any tags (core/FORMATS.md)")),
        required(text("out", "DIR", "items.jsonl, items.csv, heads.csv, summary.md, summary.json")),
        models_option("the models run"), flag("resume", "go on from what --out holds (a stopped run)"),
        flag(
            "steps",
            "each model given is a training run's model folder: run every step it kept (train --keep-every), "
            "and write steps.csv and steps.png/.svg (the measures against the step, 95 % intervals)"),
        intervene_option(), device_option("auto"), threads_option()},
       "Each item runs once on each model (prompt + answer, teacher-forced). An item that cannot run is written "
       "to errors.csv with why, and the exit status is 1.",
       cmd_batch}};
}

}  // namespace difflens::cli
