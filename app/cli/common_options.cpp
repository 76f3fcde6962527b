// Option rows several commands take, written once, and what they give: threads, device, models, the prompt
// (text, file or ids), special tokens, the pooled budget, interventions, a pair's shape.
#include "app/cli/common_options.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "app/cli/paths.h"
#include "app/common/files.h"
#include "core/formats/checkpoint.h"
#include "core/formats/error.h"
#include "core/formats/model_dir.h"
#include "core/formats/tokenizer.h"

namespace difflens::cli {

Option threads_option() {
  return integer("threads", "N", 1, 4096, "",
                 "CPU threads (default: every core, " + std::to_string(default_threads()) + " here)");
}

Option device_option(const std::string& fallback) {
  return choice("device", "auto|cpu|cuda", fallback,
                "where the models run (auto: CUDA when this LibTorch build has a GPU)");
}

Option models_option(const std::string& help) {
  return text("models", "DIR1,DIR2", help + " (default: the bundled diff-small,baseline-small)");
}

Option prompt_option() {
  return text("prompt", "TEXT", "the prompt");
}

Option prompt_file_option() {
  return text("prompt-file", "F", "the prompt read from a file (any bytes)");
}

Option specials_option() {
  return choice(
      "specials", "match|text", "match",
      "special tokens written in the prompt (<|endoftext|>, <|eot_id|>): matched as their ids, or read "
      "as the text they are (a document about tokenizers; no forged document boundary)");
}

Option answer_option() {
  return int_list(
      "answer", "BEGIN,END", 0, 1e9, 2, 2,
      "the answer's tokens, marked: [BEGIN, END), END excluded (10,13 marks tokens 10, 11 and 12)");
}

Option intervene_option() {
  return repeatable(text("intervene", "SPEC",
                         "run the model changed: lambda[:L[:H]]=V|init, ablate:L:H[=mean], "
                         "knockout[:L[:H]]=not-answer|only-answer|not-noise|drop:B-E|keep:B-E[@ROWS] "
                         "(core/FORMATS.md, Interventions)"));
}

Option query_option() {
  return integer("query", "I", 0, 1e9, "", "the query token (default: the last); knockouts start there");
}

Interventions interventions_of(const Args& a, const ModelConfig& config, int64_t tokens) {
  const std::vector<std::string> specs = a.get_all("intervene");
  if (specs.empty()) return {};
  PromptMarks marks;
  if (a.takes("answer") && a.has("answer")) {
    const std::vector<int> answer = a.get_int_list("answer");
    marks.answer = {answer[0], answer[1]};
  }
  marks.query = a.takes("query") && a.has("query") ? a.get_int("query") : tokens - 1;
  if (marks.query >= tokens)
    throw Error("--query " + std::to_string(marks.query) + " is beyond the " + std::to_string(tokens) +
                "-token prompt");
  return resolve_interventions(specs, config, marks, tokens);
}

std::string interventions_line(const std::vector<std::pair<std::string, std::string>>& applied) {
  std::string line;
  for (const auto& [spec, as_run] : applied)
    line += (line.empty() ? "" : "; ") + spec + (spec == as_run ? "" : " (as run: " + as_run + ")");
  return line.empty() ? "" : "interventions  " + line;
}

Option pooled_budget_option(const std::string& fallback) {
  return number("pooled-budget", "MB", 0, 1e6, fallback,
                "long prompts: pooled maps (mean/max) within MB per model once exact maps would not fit "
                "(0: always exact); rows and tiles are recomputed exactly");
}

Option haystack_option() {
  return text(
      "haystack", "FILE",
      "haystack text for needle episodes (default: the bundled haystack.txt, share/difflens/ when installed)");
}

std::vector<Option> pair_shape_options() {
  const PairSpec d;
  return {integer("hidden", "E", 8, 65536, std::to_string(d.hidden_size), "hidden size"),
          integer("layers", "N", 1, 1024, std::to_string(d.num_layers), "layers"),
          integer("heads", "H", 1, 1024, std::to_string(d.diff_heads), "DIFF heads (the baseline gets 2H)"),
          integer("kv-heads", "H", 1, 1024, "", "DIFF key/value heads, GQA when fewer (default: --heads)"),
          integer("vocab", "V", 259, 1 << 24, std::to_string(d.vocab_size), "vocabulary size")};
}

PairSpec pair_spec(const Args& a) {
  PairSpec s;
  s.hidden_size = a.get_int("hidden");
  s.num_layers = a.get_int("layers");
  s.diff_heads = a.get_int("heads");
  s.diff_kv_heads = a.get_int("kv-heads", static_cast<int>(s.diff_heads));
  s.vocab_size = a.get_int("vocab");
  return s;
}

void apply_threads(const Args& a) {
  set_num_threads(a.has("threads") ? a.get_int("threads") : default_threads());
}

DeviceChoice device(const Args& a) {
  return parse_device(a.get("device"));
}

std::vector<std::string> model_dirs(const Args& a, size_t exactly, const char* expects) {
  std::vector<std::string> dirs;
  if (!a.has("models")) return {bundled_model("diff-small"), bundled_model("baseline-small")};
  std::stringstream ss(a.get("models"));
  for (std::string d; std::getline(ss, d, ',');) {
    if (d.empty()) continue;
    // A folder holding models in sub-folders (the diff-mlx pair) or a hub cache folder: the models in it,
    // DIFF first. Remote models and paths that are not there are left to the loader to report.
    std::error_code ec;
    if (d.rfind("remote://", 0) != 0 && std::filesystem::is_directory(d, ec)) {
      for (const auto& m : models_in(d)) dirs.push_back(m.string());
      continue;
    }
    dirs.push_back(d);
  }
  if (exactly > 0 && dirs.size() != exactly)
    throw Error(std::string("--models expects ") + expects + ", got '" + a.get("models") + "'");
  if (dirs.empty()) throw Error("--models expects one or more model directories, comma-separated");
  return dirs;
}

std::string prompt_text(const Args& a) {
  if (a.has("prompt") == a.has("prompt-file")) throw Error("give exactly one of --prompt, --prompt-file");
  return a.has("prompt") ? a.get("prompt") : read_file(a.get("prompt-file"));
}

Specials prompt_specials(const Args& a) {
  return a.takes("specials") && a.get("specials") == "text" ? Specials::text : Specials::match;
}

std::vector<int64_t> prompt_ids(const Args& a, const Model& model) {
  const bool ids = a.takes("token-ids") && a.has("token-ids");
  const int sources = a.has("prompt") + a.has("prompt-file") + ids;
  if (sources != 1)
    throw Error(a.takes("token-ids") ? "give exactly one of --prompt, --prompt-file, --token-ids"
                                     : "give exactly one of --prompt, --prompt-file");
  if (ids && prompt_specials(a) == Specials::text)
    throw Error("--specials is for a text prompt, not --token-ids");
  PromptInput in;
  if (ids) {
    in.ids = parse_token_ids(a.get("token-ids"), model.config().vocab_size);
  } else {
    in.text = a.has("prompt") ? a.get("prompt") : read_file(a.get("prompt-file"));
    if (in.text.empty()) throw Error("the prompt is empty: nothing to run");
    in.bos = !(a.takes("no-bos") && a.has("no-bos"));
    in.specials = prompt_specials(a);
  }
  std::vector<int64_t> out =
      encode_prompt(model, in, a.takes("token-ids") ? "give --token-ids" : "this command takes text only")
          .ids;
  const std::string note = positions_note(model.config(), static_cast<int64_t>(out.size()));
  if (!note.empty()) std::fprintf(stderr, "difflens: note: %s\n", note.c_str());
  return out;
}

size_t pooled_budget_bytes(const Args& a) {
  return a.has("pooled-budget") ? static_cast<size_t>(a.get_double("pooled-budget") * 1024 * 1024) : 0;
}

}  // namespace difflens::cli
