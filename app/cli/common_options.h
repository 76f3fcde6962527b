// Option rows several commands take, written once, and what they give: threads, device, models, the prompt
// (text, file or ids), special tokens, the pooled budget, interventions, a pair's shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "app/cli/options.h"
#include "app/common/cores.h"
#include "core/formats/config.h"
#include "core/formats/intervention.h"
#include "core/model/model.h"

namespace difflens::cli {

// Option rows several commands take, written once.
Option threads_option();                            // --threads N (absent: LibTorch's default)
Option device_option(const std::string& fallback);  // --device auto|cpu|cuda
Option models_option(const std::string& help);      // --models DIR1,DIR2,...
Option prompt_option();                             // --prompt TEXT
Option prompt_file_option();                        // --prompt-file F
Option specials_option();                           // --specials match|text
Option answer_option();                             // --answer BEGIN,END (half-open)
Option pooled_budget_option(const std::string& fallback);
Option haystack_option();
// --intervene SPEC (repeatable; core/formats/intervention.h) and --query I (the knockout presets' rows start
// there).
Option intervene_option();
Option query_option();
// --hidden, --layers, --heads, --kv-heads, --vocab: the shape of a matched pair (init-pair, bench), and
// the PairSpec they give.
std::vector<Option> pair_shape_options();
PairSpec pair_spec(const Args& a);

// The CPU threads a command uses: --threads N, else every core this process may run on (as the app does;
// default_threads() in app/common/cores.h).
void apply_threads(const Args& a);

DeviceChoice device(const Args& a);
// --models as a list (default: the bundled DIFF and baseline pair). `exactly` > 0 requires that many;
// `expects` names them in the message ("DIFF_DIR,BASELINE_DIR").
std::vector<std::string> model_dirs(const Args& a, size_t exactly = 0, const char* expects = "");
// The prompt's ids from exactly one of --prompt, --prompt-file, --token-ids (where the table has it).
std::vector<int64_t> prompt_ids(const Args& a, const Model& model);
// The text of --prompt or --prompt-file (exactly one).
std::string prompt_text(const Args& a);
// --specials: how special tokens written in the prompt are read (match when the command has no such option).
Specials prompt_specials(const Args& a);
size_t pooled_budget_bytes(const Args& a);  // --pooled-budget MB; 0 when absent
// The budget for a long prompt's maps per model, in MB, where --pooled-budget is not given: the app's and
// `capture`'s (exact maps over it are pooled).
inline constexpr size_t kDefaultPooledBudgetMb = 256;
// The --intervene specs against `model` and a prompt of `tokens` tokens: its answer (--answer, where the
// table has it) and query (--query, else the last token). Empty when none is given. Throws Error naming the
// spec and what is wrong.
Interventions interventions_of(const Args& a, const ModelConfig& config, int64_t tokens);
// "interventions  knockout=not-answer (as run: knockout=drop:10-14@40-); ..." for a command's report, or
// "" when none.
std::string interventions_line(const std::vector<std::pair<std::string, std::string>>& applied);

}  // namespace difflens::cli
