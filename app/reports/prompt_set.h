// A prompt set run into a folder (`difflens batch`, the app's File > Run a prompt set; core/model/batch.h
// runs each item): the items read a line at a time (a 10,000-item file never sits in memory), each item's
// results appended as it ends (items.jsonl last, so that a resumed run trusts what it holds), then a summary
// with 95 % intervals and paired tests (core/formats/stats.h), and with kept training steps their measures
// against the step. The files and their columns: core/FORMATS.md, "Prompt sets".
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/model/batch.h"

namespace difflens::app {

// The items file a line at a time; a line over 64 MB is refused by number, not read whole.
class ItemReader {
 public:
  explicit ItemReader(const std::string& path);  // throws Error when it cannot be read
  // The next non-blank line (false at the end); `line` gets its number.
  bool next(std::string& text, int64_t& line);

 private:
  std::ifstream in_;
  std::string path_;
  int64_t line_ = 0;
};

// Non-blank lines of an items file.
int64_t count_items(const std::string& path);

// One run's folder: items.jsonl, items.csv, heads.csv, patch.csv (items with a corrupt prompt), errors.csv.
class PromptSetWriter {
 public:
  // Creates `out`. Without `resume`, refuses a folder that holds a run's files ("LABEL: items.jsonl is there
  // already; HINT"); with it, keeps the items items.jsonl holds (a record cut short is dropped) and drops the
  // CSV rows of any other, so that those run again whole.
  PromptSetWriter(const std::filesystem::path& out, bool resume, const std::string& label,
                  const std::string& hint = "give --resume to go on from it, or another --out");
  // The item at `line` was written for `model` before (a resumed run skips it).
  bool done(int64_t line, const std::string& model) const;
  // The item's rows and record; its patching's failure (BatchOutcome::patch_error) to errors.csv.
  void write(const BatchItem& item, const BatchOutcome& outcome, const std::string& model);
  void error(int64_t line, const std::string& id, const std::string& model, const std::string& what);
  // One line of the items file on one model: skipped when done before, else parsed, run (core/model/batch.h's
  // run_batch_entry under `specs`; those the model cannot take go to `refused`) and written, or its error
  // written to errors.csv. Cancelled (from `cancel`) is thrown on, nothing written.
  enum class Outcome { Skipped, Written, Failed };
  Outcome run(const Model& model, const std::string& name, const std::string& text, int64_t line,
              const std::vector<std::string>& specs, std::vector<std::string>& refused,
              const std::atomic<bool>* cancel = nullptr);
  int64_t unpatched() const { return unpatched_; }
  // summary.md and summary.json over every item items.jsonl holds (summary_out: the JSON); the Markdown.
  std::string finish(const std::vector<std::string>& models, nlohmann::json* summary_out = nullptr) const;
  const std::filesystem::path& folder() const { return out_; }

 private:
  std::filesystem::path out_;
  std::set<std::pair<int64_t, std::string>> done_;
  std::unique_ptr<std::ofstream> jsonl_, items_csv_, heads_csv_, patch_csv_;
  std::ofstream errors_;
  int64_t unpatched_ = 0;
  std::unique_ptr<std::ofstream> open_append(const char* file, const char* header) const;
};

// --steps: one kept step of a training run, a model of the batch.
struct StepModel {
  std::string dir, run;  // the step's folder, the run's name ("seeds-1/diff-small")
  int64_t step = 0;
  AttentionKind kind = AttentionKind::Baseline;
};

// steps.csv and steps.png/.svg from the summary: per run and step, accuracy and the attention measures with
// their intervals (names: each step's model name in the summary, in the order of `steps`).
void write_steps(const std::filesystem::path& out, const std::vector<StepModel>& steps,
                 const std::vector<std::string>& names, const nlohmann::json& summary);

}  // namespace difflens::app
