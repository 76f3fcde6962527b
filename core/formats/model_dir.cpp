// Model folders: hub cache folders, pairs in sub-folders, and the diff-mlx layout's config and names.
#include "core/formats/model_dir.h"
#include "core/formats/bounded_read.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/formats/error.h"
#include "core/formats/safetensors.h"

namespace difflens {

const char* const kCl100kUrl = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken";

namespace {

using nlohmann::json;

std::string read_text(const std::filesystem::path& file) {
  return read_bounded(file, "file", kMetadataLimit);
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return s.substr(b);
}

bool is_model_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir / "config.json", ec);
}

// What a folder holds, for a message: up to 12 names, folders with a trailing '/'.
std::string listing(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    names.push_back(it->path().filename().string() + (it->is_directory(e2) ? "/" : ""));
  }
  if (names.empty()) return "nothing";
  std::sort(names.begin(), names.end());
  std::string out;
  for (size_t i = 0; i < names.size() && i < 12; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 12) out += " and " + std::to_string(names.size() - 12) + " more";
  return out;
}

const char* const kLayouts =
    "DiffLens reads: a DiffLens checkpoint (config.json, model.safetensors); a Hugging Face folder of "
    "LlamaForCausalLM, MistralForCausalLM or DiffLlamaForCausalLM (config.json, model.safetensors or shards "
    "with model.safetensors.index.json); a diff-mlx folder (config.json with n_heads_vanilla, "
    "latest.safetensors); a Hugging Face hub cache folder models--ORG--NAME (snapshots/, refs/main); a "
    "Hugging Face Trainer's output folder (checkpoint-N sub-folders: the last is read); a folder holding two of "
    "these in sub-folders";

[[noreturn]] void config_fail(const std::string& src, const std::string& what) {
  throw ConfigError(src + ": " + what);
}

}  // namespace

std::filesystem::path tidy(const std::filesystem::path& p) {
  std::filesystem::path t = p.lexically_normal();
  if (t.filename().empty() && t.has_parent_path()) t = t.parent_path();
  return t;
}

// A hub cache's snapshot holds links into the cache's blobs/ (as the hub lays them out): each entry that is a
// link must resolve, and inside `cache`; one that loops or leads elsewhere (/dev/urandom, another folder) is
// refused by name before anything reads through it.
static void check_links_within(const std::filesystem::path& cache, const std::filesystem::path& snap) {
  std::error_code ec;
  const std::filesystem::path root = std::filesystem::weakly_canonical(cache, ec);
  if (ec) throw Error(cache.string() + ": cannot be resolved (" + ec.message() + ")");
  for (std::filesystem::directory_iterator it(snap, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_symlink(e2)) continue;
    const std::filesystem::path target = std::filesystem::canonical(it->path(), e2);
    if (e2)
      throw Error(it->path().string() + ": a link that cannot be followed (" + e2.message() +
                  "): a hub cache's files link into its blobs/");
    const auto rel = target.lexically_relative(root);
    if (rel.empty() || *rel.begin() == "..")
      throw Error(it->path().string() + ": links outside the hub cache folder (to " + target.string() +
                  "): a hub cache's files link into its own blobs/");
  }
}

std::filesystem::path resolve_hub_cache(const std::filesystem::path& given) {
  const std::filesystem::path path = tidy(given);
  std::error_code ec;
  const std::filesystem::path snapshots = path / "snapshots";
  if (path.filename().string().rfind("models--", 0) != 0 || !std::filesystem::is_directory(snapshots, ec))
    return given;
  const std::filesystem::path ref = path / "refs" / "main";
  if (std::filesystem::is_regular_file(ref, ec)) {
    const std::string hash = trim(read_text(ref));
    if (hash.empty() || hash.size() > 64 ||
        hash.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
      throw Error(ref.string() + ": does not name a snapshot (a commit hash, hex digits)");
    const std::filesystem::path snap = snapshots / hash;
    if (!std::filesystem::is_directory(snap, ec))
      throw Error(ref.string() + " names the snapshot " + hash + ", which is not in " + snapshots.string() +
                  " (the download did not finish?)");
    check_links_within(path, snap);
    return snap;
  }
  std::vector<std::filesystem::path> all;
  for (std::filesystem::directory_iterator it(snapshots, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    const bool dir = it->is_directory(e2);
    if (e2)  // a link to itself, or one too deep
      throw Error(it->path().string() + ": a link that cannot be followed (" + e2.message() + ")");
    if (dir) all.push_back(it->path());
  }
  if (all.size() == 1) {
    check_links_within(path, all[0]);
    return all[0];
  }
  if (all.empty())
    throw Error(path.string() + ": a hub cache folder with no snapshot (nothing downloaded yet)");
  std::sort(all.begin(), all.end());
  std::string names;
  for (const auto& p : all) names += (names.empty() ? "" : ", ") + p.filename().string();
  throw Error(path.string() + ": a hub cache folder with several snapshots (" + names +
              ") and no refs/main to say which: give the snapshot's folder");
}

std::filesystem::path resolve_model_folder(const std::filesystem::path& given, std::string* note) {
  const std::filesystem::path path = resolve_hub_cache(given);
  if (note) note->clear();
  if (is_model_folder(path)) return path;
  std::error_code ec;
  std::filesystem::path latest;
  long long best = -1;
  int count = 0;
  for (std::filesystem::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e2;
    if (name.rfind("checkpoint-", 0) != 0 || name.size() == 11 || name.size() > 11 + 15 ||
        !it->is_directory(e2) || !is_model_folder(it->path()))
      continue;
    if (!std::all_of(name.begin() + 11, name.end(), [](unsigned char c) { return std::isdigit(c); }))
      continue;
    ++count;
    const long long step = std::stoll(name.substr(11));
    if (step > best) {
      best = step;
      latest = it->path();
    }
  }
  if (latest.empty()) return path;
  if (note)
    *note = "a Trainer run: its last save, " + latest.filename().string() +
            (count > 1 ? " (of " + std::to_string(count) + " checkpoint-N folders: give one to open another)"
                       : std::string());
  return latest;
}

std::vector<std::filesystem::path> models_in(const std::filesystem::path& typed) {
  const std::filesystem::path given = tidy(typed);
  std::error_code ec;
  if (!std::filesystem::exists(given, ec)) throw Error(given.string() + ": no such folder");
  if (!std::filesystem::is_directory(given, ec))
    throw Error(given.string() + ": not a folder (a model is a folder)");
  const std::filesystem::path path = resolve_hub_cache(given);
  // As given: a cache folder's name names the model; a Trainer run is one model (its last checkpoint).
  if (is_model_folder(resolve_model_folder(path))) return {given};
  std::vector<std::filesystem::path> found;
  for (std::filesystem::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code e2;
    if (!it->is_directory(e2)) continue;
    // A hub cache folder among them stays as it is (Model::load resolves it and is named by it); one that
    // is broken (a download cut short) is left out rather than hiding the others.
    try {
      if (is_model_folder(resolve_model_folder(it->path()))) found.push_back(it->path());
    } catch (const Error&) {
    }
  }
  auto is_diff = [](const std::filesystem::path& p) {
    std::string n = p.filename().string();
    std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
    return n.find("diff") != std::string::npos;
  };
  std::sort(found.begin(), found.end(), [&](const auto& a, const auto& b) {
    if (is_diff(a) != is_diff(b)) return is_diff(a);
    return a.filename().string() < b.filename().string();
  });
  if (!found.empty()) return found;
  throw Error(given.string() + (path != given ? " (snapshot " + path.filename().string() + ")" : "") +
              ": not a model folder (no config.json) and no model in its sub-folders. " + kLayouts +
              ". It holds: " + listing(path));
}

std::pair<std::filesystem::path, std::filesystem::path> pair_of(
    const std::vector<std::filesystem::path>& models) {
  if (models.size() < 2) throw Error("a pair needs two models");
  std::vector<bool> diff;  // each model's kind by its config, read once (unreadable: not DIFF)
  for (const auto& p : models) {
    try {
      diff.push_back(read_model_config(resolve_model_folder(p)).is_diff());
    } catch (const std::exception&) {
      diff.push_back(false);
    }
  }
  size_t left = 0;
  while (left < models.size() && !diff[left]) ++left;
  if (left == models.size()) return {models[0], models[1]};  // no DIFF model: the first two
  for (size_t r = 0; r < models.size(); ++r)
    if (r != left && !diff[r]) return {models[left], models[r]};
  return {models[left], models[left == 0 ? 1 : 0]};  // only DIFF models
}

ModelLayout layout_of_config(const std::string& text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    return ModelLayout::DiffLens;  // the config reader says what is wrong with it
  }
  if (!j.is_object()) return ModelLayout::DiffLens;
  const json& m = j.contains("model") && j["model"].is_object() ? j["model"] : j;
  if (m.contains("n_heads_vanilla")) return ModelLayout::DiffMlx;
  if (!j.contains("difflens_format") && (j.contains("architectures") || j.contains("model_type")))
    return ModelLayout::HuggingFace;
  return ModelLayout::DiffLens;
}

ModelConfig read_model_config(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    if (!std::filesystem::is_directory(dir, ec)) throw ConfigError(dir.string() + ": not a model directory");
    const std::vector<std::filesystem::path> inside = models_in(dir);  // none: the layouts DiffLens reads
    std::string names;
    for (const auto& p : inside) names += (names.empty() ? "" : ", ") + p.filename().string();
    if (inside.size() == 1)
      throw ConfigError(dir.string() + ": the model is in its sub-folder " + names + ": give that folder");
    throw ConfigError(dir.string() + ": holds " + std::to_string(inside.size()) + " models in sub-folders (" +
                      names +
                      "), not one: give one of them (--models and File > Open model take the folder and open "
                      "each in its own slot)");
  }
  const std::string text = read_text(file);
  if (layout_of_config(text) != ModelLayout::DiffMlx) return config_from_json_text(text, file.string());
  const SafetensorsFile weights(diff_mlx_weights(dir));
  bool diff = false;
  for (const TensorInfo& t : weights.tensors())
    if (t.name.size() > 14 && t.name.compare(t.name.size() - 14, 14, "attn.lambda_q1") == 0) diff = true;
  return diff_mlx_config(text, file.string(), diff);
}

CheckpointFiles open_model_weights(const std::filesystem::path& dir, const ModelConfig& config) {
  if (config.architecture != "diff-mlx") return CheckpointFiles(dir);
  return CheckpointFiles(diff_mlx_weights(dir), diff_mlx_tensor_name);
}

ModelConfig diff_mlx_config(const std::string& text, const std::string& src, bool diff) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    config_fail(src, std::string("not valid JSON (") + e.what() + ")");
  }
  if (!j.is_object()) config_fail(src, "top level must be a JSON object");
  const json& m = j.contains("model") && j["model"].is_object() ? j["model"] : j;
  // diff-mlx's ModelConfig (config.py): every field it has, nothing else (a field DiffLens did not know
  // could change the model).
  static const std::vector<std::string> kKeys = {
      "dim",        "n_layers",  "n_heads_vanilla", "qk_head_dim",    "vocab_size", "mlp_intermediate",
      "block_size", "rope_base", "rms_eps",         "tie_embeddings", "amp_dtype"};
  std::string known;
  for (const auto& k : kKeys) known += (known.empty() ? "" : ", ") + k;
  for (const auto& [k, v] : m.items())
    if (std::find(kKeys.begin(), kKeys.end(), k) == kKeys.end())
      config_fail(src, "'" + k + "' is not a field of diff-mlx's model config (" + known + ")");
  auto integer = [&](const char* k) -> int64_t {
    if (!m.contains(k)) config_fail(src, std::string("missing field '") + k + "' (diff-mlx's model config)");
    if (!m[k].is_number_integer() || m[k].get<int64_t>() <= 0)
      config_fail(src, std::string("'") + k + "' must be a positive integer");
    return m[k].get<int64_t>();
  };
  auto number = [&](const char* k, double fallback) -> double {
    if (!m.contains(k)) return fallback;
    if (!m[k].is_number() || !(m[k].get<double>() > 0))
      config_fail(src, std::string("'") + k + "' must be a positive number");
    return m[k].get<double>();
  };
  ModelConfig c;
  c.architecture = "diff-mlx";
  c.attention = diff ? AttentionKind::Diff : AttentionKind::Baseline;
  c.hidden_size = integer("dim");
  c.num_hidden_layers = integer("n_layers");
  const int64_t heads = integer("n_heads_vanilla"), d = integer("qk_head_dim");
  if (heads * d != c.hidden_size)
    config_fail(src, "dim " + std::to_string(c.hidden_size) + " is not n_heads_vanilla x qk_head_dim (" +
                         std::to_string(heads) + " x " + std::to_string(d) + "), as diff-mlx requires");
  if (diff && heads % 2 != 0)
    config_fail(src, "n_heads_vanilla " + std::to_string(heads) +
                         " is odd: diff-mlx pairs its heads into differential heads");
  // Its DIFF model has n_heads_vanilla / 2 heads of two d-wide components (q sub-heads 2h and 2h+1), V
  // 2d wide per head; its plain model n_heads_vanilla heads of width d: both are DiffLens's 2H sub-heads.
  c.num_attention_heads = c.num_key_value_heads = heads;
  c.head_dim = d;
  c.vocab_size = integer("vocab_size");
  c.intermediate_size = integer("mlp_intermediate");
  // diff-mlx's RoPE (mx.fast.rope) has no table and its model no length check: any prompt runs. block_size
  // is the length it was trained to; beyond it, a note says so (positions_note).
  c.trained_positions = integer("block_size");
  c.max_position_embeddings = std::max<int64_t>(c.trained_positions, int64_t{1} << 20);
  c.rope_theta = number("rope_base", 10000.0);
  c.rms_norm_eps = c.subln_eps = number("rms_eps", 1e-5);
  // diff-mlx's model.py ties the embeddings whatever tie_embeddings says (it has no output matrix of its
  // own: the logits are the final norm's output times the embedding), so false is read as it runs: tied.
  if (m.contains("tie_embeddings") && !m["tie_embeddings"].is_boolean())
    config_fail(src, "'tie_embeddings' must be true or false");
  if (m.contains("amp_dtype")) {
    const std::string a = m["amp_dtype"].is_string() ? m["amp_dtype"].get<std::string>() : "";
    if (a != "float32" && a != "bfloat16")
      config_fail(src, "amp_dtype '" + (a.empty() ? m["amp_dtype"].dump() : a) +
                           "' is not one diff-mlx has (float32, bfloat16)");
  }
  c.tie_word_embeddings = true;
  c.rope_style = RopeStyle::Interleaved;  // mx.fast.rope(traditional=True) rotates (x[2i], x[2i+1])
  c.diff_pairing = DiffPairing::Adjacent;
  c.subln_weight = true;
  // cl100k_base: documents end with <|endoftext|> (100257) in its training stream; a prompt starts after one.
  c.tokenizer = TokenizerKind::Tiktoken;
  c.bos_token_id = c.eos_token_id = c.vocab_size == 100277 ? 100257 : -1;
  c.validate(src);
  return c;
}

std::string diff_mlx_tensor_name(const std::string& name) {
  // MLX's own names never start with "model." or "opt." (the model's attributes are tok_embed, blocks and
  // final_norm): those prefixes are checkpoint.py's namespaces, the optimizer's state left out.
  if (name.rfind("opt.", 0) == 0) return "";
  const std::string n = name.rfind("model.", 0) == 0 ? name.substr(6) : name;
  static const std::map<std::string, std::string> kWhole = {{"tok_embed.weight", "model.embed_tokens.weight"},
                                                            {"final_norm.scale", "model.norm.weight"}};
  if (auto it = kWhole.find(n); it != kWhole.end()) return it->second;
  if (n.rfind("blocks.", 0) != 0) return name;
  const size_t dot = n.find('.', 7);
  if (dot == std::string::npos) return name;
  const std::string layer = n.substr(7, dot - 7), rest = n.substr(dot + 1);
  if (layer.empty() || layer.find_first_not_of("0123456789") != std::string::npos) return name;
  static const std::map<std::string, std::string> kInLayer = {
      {"norm_attn.scale", "input_layernorm.weight"},
      {"norm_mlp.scale", "post_attention_layernorm.weight"},
      {"attn.q_proj.weight", "self_attn.q_proj.weight"},
      {"attn.k_proj.weight", "self_attn.k_proj.weight"},
      {"attn.v_proj.weight", "self_attn.v_proj.weight"},
      {"attn.o_proj.weight", "self_attn.o_proj.weight"},
      {"attn.lambda_q1", "self_attn.lambda_q1"},
      {"attn.lambda_k1", "self_attn.lambda_k1"},
      {"attn.lambda_q2", "self_attn.lambda_q2"},
      {"attn.lambda_k2", "self_attn.lambda_k2"},
      {"attn.subln.scale", "self_attn.subln.weight"},
      {"mlp.gate.weight", "mlp.gate_proj.weight"},
      {"mlp.up.weight", "mlp.up_proj.weight"},
      {"mlp.down.weight", "mlp.down_proj.weight"}};
  auto it = kInLayer.find(rest);
  return it == kInLayer.end() ? name : "model.layers." + layer + "." + it->second;
}

std::filesystem::path diff_mlx_weights(const std::filesystem::path& dir) {
  std::error_code ec;
  for (const char* f : {"model.safetensors", "latest.safetensors"})
    if (std::filesystem::is_regular_file(dir / f, ec)) return dir / f;
  std::vector<std::filesystem::path> all;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".safetensors") all.push_back(it->path());
  if (all.size() == 1) return all[0];
  if (all.empty())
    throw FormatError(dir.string() +
                      ": a diff-mlx folder without weights (no latest.safetensors); it holds " +
                      listing(dir));
  std::sort(all.begin(), all.end());
  std::string names;
  for (const auto& p : all) names += (names.empty() ? "" : ", ") + p.filename().string();
  throw FormatError(dir.string() + ": several checkpoints (" + names +
                    ") and no latest.safetensors: keep one, or name the one to open latest.safetensors");
}

std::filesystem::path find_cl100k(const std::filesystem::path& folder, std::vector<std::string>* looked) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(folder, ec);
  dir = tidy(ec ? folder : dir);
  std::vector<std::filesystem::path> places = {dir / "cl100k_base.tiktoken",
                                               dir.parent_path() / "cl100k_base.tiktoken"};
  // tiktoken's cache: the file is named by the SHA-1 of its download address.
  const char* sha1 = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4";
  if (const char* c = std::getenv("TIKTOKEN_CACHE_DIR"); c && *c)
    places.push_back(std::filesystem::path(c) / sha1);
  else if (const char* g = std::getenv("DATA_GYM_CACHE_DIR"); g && *g)
    places.push_back(std::filesystem::path(g) / sha1);
  else
    places.push_back(std::filesystem::temp_directory_path() / "data-gym-cache" / sha1);
  for (const auto& p : places) {
    if (looked) looked->push_back(p.string());
    if (std::filesystem::is_regular_file(p, ec)) return p;
  }
  return {};
}

namespace fs = std::filesystem;

KeptSteps kept_steps(const fs::path& folder) {
  KeptSteps k;
  const fs::path f = tidy(folder);
  const std::string name = f.filename().string();
  k.model = f.parent_path().filename() == "checkpoints" && name.rfind("step-", 0) == 0
                ? f.parent_path().parent_path()
                : f;
  std::error_code ec;
  const fs::path dir = k.model / "checkpoints";
  if (!fs::is_directory(dir, ec)) return k;
  // A running training may remove a step meanwhile: every step of the listing is error-coded, none throws.
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::directory_entry& e = *it;
    const std::string n = e.path().filename().string();
    if (n.rfind("step-", 0) != 0 || n.size() == 5 ||
        n.find_first_not_of("0123456789", 5) != std::string::npos || n.size() > 5 + 18 ||
        !fs::exists(e.path() / "step.json", ec))
      continue;
    k.steps.emplace_back(std::stoll(n.substr(5)), e.path());
  }
  std::sort(k.steps.begin(), k.steps.end());
  return k;
}

int64_t KeptSteps::step_of(const fs::path& folder) const {
  const fs::path f = tidy(folder);
  for (const auto& [step, path] : steps)
    if (tidy(path) == f) return step;
  return -1;
}

}  // namespace difflens
