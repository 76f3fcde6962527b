// The remote protocol's requests and needle runs as JSON: every field type- and range-checked, unknown
// fields refused (a misspelt option must not silently do nothing on a GPU server).
#include "core/formats/remote.h"

#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/formats/intervention.h"

namespace difflens::remote {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& what) {
  throw RequestError(400, what);
}

json parse_object(const std::string& body, const Limits& limits, const char* what,
                  const std::set<std::string>& fields) {
  if (body.size() > limits.max_request_bytes)
    throw RequestError(413, std::string(what) + " request of " + std::to_string(body.size()) +
                                " bytes is over this server's limit of " +
                                std::to_string(limits.max_request_bytes) + " bytes");
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    bad(std::string(what) + " request is not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object()) bad(std::string(what) + " request must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!fields.count(it.key())) {
      std::string known;
      for (const auto& f : fields) known += (known.empty() ? "" : ", ") + f;
      std::string key = it.key();
      if (key.size() > 40) key = key.substr(0, 40) + "...";
      bad(std::string(what) + " request: unknown field '" + key + "' (known: " + known + ")");
    }
  return j;
}

int64_t get_int(const json& j, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  const auto it = j.find(name);
  if (it == j.end()) return fallback;
  if (!it->is_number_integer()) bad(std::string("'") + name + "' must be an integer");
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(std::string("'") + name + "' is over " + std::to_string(hi));
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi)
    bad(std::string("'") + name + "' is " + std::to_string(v) + ", outside " + std::to_string(lo) + ".." +
        std::to_string(hi));
  return v;
}

uint64_t get_count(const json& j, const char* name, uint64_t fallback) {
  const auto it = j.find(name);
  if (it == j.end()) return fallback;
  if (!it->is_number_unsigned()) bad(std::string("'") + name + "' must be a non-negative integer");
  return it->get<uint64_t>();
}

double get_number(const json& j, const char* name, double lo, double hi, double fallback) {
  const auto it = j.find(name);
  if (it == j.end()) return fallback;
  if (!it->is_number()) bad(std::string("'") + name + "' must be a number");
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi))
    bad(std::string("'") + name + "' is " + std::to_string(v) + ", outside " + std::to_string(lo) + ".." +
        std::to_string(hi));
  return v;
}

bool get_bool(const json& j, const char* name, bool fallback) {
  const auto it = j.find(name);
  if (it == j.end()) return fallback;
  if (!it->is_boolean()) bad(std::string("'") + name + "' must be true or false");
  return it->get<bool>();
}

std::string get_string(const json& j, const char* name, const std::string& fallback) {
  const auto it = j.find(name);
  if (it == j.end()) return fallback;
  if (!it->is_string()) bad(std::string("'") + name + "' must be a string");
  return it->get<std::string>();
}

// "specials": "match" (the default) or "text": how special tokens written in a text prompt are read.
Specials get_specials(const json& j) {
  const std::string v = get_string(j, "specials", "match");
  if (v == "match") return Specials::match;
  if (v == "text") return Specials::text;
  bad("'specials' is '" + v +
      "': give \"match\" (special tokens written in the text are matched) or \"text\" "
      "(read as the text they are)");
}

std::vector<int> get_int_list(const json& j, const char* name, int hi, size_t max_items) {
  std::vector<int> out;
  const auto it = j.find(name);
  if (it == j.end()) return out;
  if (!it->is_array()) bad(std::string("'") + name + "' must be a list of integers");
  if (it->size() > max_items)
    bad(std::string("'") + name + "' lists " + std::to_string(it->size()) + " items, more than " +
        std::to_string(max_items));
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > hi)
      bad(std::string("'") + name + "' must hold integers 0.." + std::to_string(hi));
    out.push_back(static_cast<int>(v.get<int64_t>()));
  }
  return out;
}

constexpr int kMaxModels = 1 << 16;

// "interventions": a list of specs as --intervene takes them, each parsed here (absent: none).
std::vector<std::string> get_interventions(const json& j) {
  std::vector<std::string> out;
  if (!j.contains("interventions")) return out;
  const json& iv = j.at("interventions");
  if (!iv.is_array() || iv.size() > 256) bad("'interventions' must be a list of at most 256 specs");
  for (const json& v : iv) {
    if (!v.is_string()) bad("'interventions' must hold strings (specs as --intervene takes them)");
    try {
      (void)parse_intervention(v.get<std::string>());
    } catch (const Error& e) {
      bad(std::string("'interventions': ") + e.what());
    }
    out.push_back(v.get<std::string>());
  }
  return out;
}

}  // namespace

std::string Limits::to_json() const {
  return json{{"max_tokens", max_tokens},
              {"max_request_bytes", max_request_bytes},
              {"max_reply_bytes", max_reply_bytes},
              {"max_active", max_active},
              {"max_needle_tokens", max_needle_tokens}}
      .dump();
}

CaptureRequest parse_capture_request(const std::string& body, const Limits& limits) {
  const json j =
      parse_object(body, limits, "capture",
                   {"model", "prompt", "token_ids", "bos", "specials", "keep_maps", "layers", "heads",
                    "keep_logits", "keep_hidden", "keep_qkv", "top_k", "position_top_k", "logit_bits",
                    "pooled_budget_bytes", "stream", "interventions", "answer", "query"});
  CaptureRequest r;
  r.model = static_cast<int>(get_int(j, "model", 0, kMaxModels, 0));
  const bool has_prompt = j.contains("prompt"), has_ids = j.contains("token_ids");
  if (has_prompt == has_ids) bad("give exactly one of 'prompt' (text) and 'token_ids' (a list of ids)");
  if (has_prompt) {
    r.prompt = get_string(j, "prompt", "");  // "" is BOS alone (as in the app); without BOS it is refused
  } else {
    const json& ids = j.at("token_ids");
    if (!ids.is_array()) bad("'token_ids' must be a list of integers");
    if (ids.empty()) bad("'token_ids' is empty");
    if (static_cast<int64_t>(ids.size()) > limits.max_tokens)
      throw RequestError(413, "the prompt has " + std::to_string(ids.size()) +
                                  " tokens; this server takes at most " + std::to_string(limits.max_tokens));
    for (const json& v : ids) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) bad("'token_ids' must hold non-negative integers");
      r.token_ids.push_back(v.get<int64_t>());
    }
  }
  r.bos = get_bool(j, "bos", true);
  r.specials = get_specials(j);
  if (!has_prompt && r.specials == Specials::text) bad("'specials' is for a text 'prompt', not 'token_ids'");
  r.keep_maps = get_bool(j, "keep_maps", true);
  r.layers = get_int_list(j, "layers", 1 << 20, 4096);
  r.heads = get_int_list(j, "heads", 1 << 20, 4096);
  r.keep_logits = get_bool(j, "keep_logits", false);
  r.keep_hidden = get_bool(j, "keep_hidden", false);
  r.keep_qkv = get_bool(j, "keep_qkv", false);
  r.top_k = static_cast<int>(get_int(j, "top_k", 1, 1000, 10));
  r.position_top_k = static_cast<int>(get_int(j, "position_top_k", 0, 100, 0));
  r.logit_bits = static_cast<int>(get_int(j, "logit_bits", -1, 32, -1));
  if (r.logit_bits == 1) bad("'logit_bits' takes 2 to 32 bits (0: exact, -1: the model's setting)");
  r.pooled_budget_bytes = get_count(j, "pooled_budget_bytes", 0);
  if (static_cast<double>(r.pooled_budget_bytes) > limits.max_reply_bytes)
    throw RequestError(413, "'pooled_budget_bytes' of " + std::to_string(r.pooled_budget_bytes) +
                                " is over this server's reply limit of " +
                                std::to_string(static_cast<uint64_t>(limits.max_reply_bytes)) + " bytes");
  r.stream = get_bool(j, "stream", false);
  r.interventions = get_interventions(j);
  if (j.contains("answer")) {
    const std::vector<int> a = get_int_list(j, "answer", 1 << 30, 2);
    if (a.size() != 2 || a[0] >= a[1]) bad("'answer' must be [BEGIN, END] with BEGIN < END");
    r.answer_begin = a[0];
    r.answer_end = a[1];
  }
  r.query = get_int(j, "query", -1, 1 << 30, -1);
  return r;
}

std::string to_json(const CaptureRequest& r) {
  json j{{"model", r.model},
         {"bos", r.bos},
         {"keep_maps", r.keep_maps},
         {"layers", r.layers},
         {"heads", r.heads},
         {"keep_logits", r.keep_logits},
         {"keep_hidden", r.keep_hidden},
         {"keep_qkv", r.keep_qkv},
         {"top_k", r.top_k},
         {"position_top_k", r.position_top_k},
         {"logit_bits", r.logit_bits},
         {"pooled_budget_bytes", r.pooled_budget_bytes},
         {"stream", r.stream}};
  if (!r.interventions.empty()) j["interventions"] = r.interventions;
  if (r.answer_begin >= 0) j["answer"] = {r.answer_begin, r.answer_end};
  if (r.specials == Specials::text) j["specials"] = "text";  // absent: matched (what older servers do)
  if (r.query >= 0) j["query"] = r.query;
  if (r.prompt)
    j["prompt"] = *r.prompt;
  else
    j["token_ids"] = r.token_ids;
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

TileRequest parse_tile_request(const std::string& body, const Limits& limits) {
  const json j =
      parse_object(body, limits, "tile", {"model", "layer", "head", "row0", "rows", "col0", "cols"});
  TileRequest r;
  r.model = static_cast<int>(get_int(j, "model", 0, kMaxModels, 0));
  r.layer = static_cast<int>(get_int(j, "layer", 0, 1 << 20, 0));
  r.head = static_cast<int>(get_int(j, "head", 0, 1 << 20, 0));
  const int64_t most = limits.max_tokens;
  r.row0 = get_int(j, "row0", 0, most, 0);
  r.rows = get_int(j, "rows", 1, most, 1);
  r.col0 = get_int(j, "col0", 0, most, 0);
  r.cols = get_int(j, "cols", 1, most, 1);
  if (static_cast<double>(r.rows) * static_cast<double>(r.cols) * 12 > limits.max_reply_bytes)
    throw RequestError(413, "a tile of " + std::to_string(r.rows) + " x " + std::to_string(r.cols) +
                                " is over this server's reply limit");
  return r;
}

std::string to_json(const TileRequest& r) {
  return json{{"model", r.model}, {"layer", r.layer}, {"head", r.head}, {"row0", r.row0},
              {"rows", r.rows},   {"col0", r.col0},   {"cols", r.cols}}
      .dump();
}

TokenizeRequest parse_tokenize_request(const std::string& body, const Limits& limits) {
  const json j = parse_object(body, limits, "tokenize", {"model", "text", "bos", "specials"});
  TokenizeRequest r;
  r.model = static_cast<int>(get_int(j, "model", 0, kMaxModels, 0));
  if (!j.contains("text")) bad("tokenize request: 'text' is missing");
  r.text = get_string(j, "text", "");
  r.bos = get_bool(j, "bos", true);
  r.specials = get_specials(j);
  return r;
}

std::string to_json(const TokenizeRequest& r) {
  json j{{"model", r.model}, {"text", r.text}, {"bos", r.bos}};
  if (r.specials == Specials::text) j["specials"] = "text";
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

NeedleRequest parse_needle_request(const std::string& body, const Limits& limits) {
  const json j = parse_object(body, limits, "needle",
                              {"model", "length", "depth", "needles", "queried", "seed", "haystack", "names",
                               "needle_sentence", "question", "logit_bits", "interventions"});
  NeedleRequest r;
  r.model = static_cast<int>(get_int(j, "model", 0, kMaxModels, 0));
  r.cell.length = get_int(j, "length", 16, limits.max_needle_tokens, 256);
  r.cell.depth = get_number(j, "depth", 0.0, 1.0, 0.5);
  r.cell.needles = static_cast<int>(get_int(j, "needles", 1, 64, 1));
  r.cell.queried = static_cast<int>(get_int(j, "queried", 1, 64, 1));
  if (r.cell.queried > r.cell.needles) bad("'queried' must not exceed 'needles'");
  r.seed = get_count(j, "seed", 1);
  if (!j.contains("haystack"))
    bad("needle request: 'haystack' (the text episodes are built from) is missing");
  r.haystack = get_string(j, "haystack", "");
  if (r.haystack.empty()) bad("needle request: 'haystack' is empty");
  try {
    r.names = parse_name_set(get_string(j, "names", "single-token"));
  } catch (const RequestError&) {
    throw;
  } catch (const Error& e) {
    bad(std::string("'names': ") + e.what());
  }
  r.wording.needle = get_string(j, "needle_sentence", r.wording.needle);
  r.wording.question = get_string(j, "question", r.wording.question);
  try {
    r.wording.validate();
  } catch (const Error& e) {
    bad(e.what());
  }
  r.logit_bits = static_cast<int>(get_int(j, "logit_bits", 0, 32, 0));
  if (r.logit_bits == 1) bad("'logit_bits' takes 2 to 32 bits (0: exact)");
  r.interventions = get_interventions(j);
  return r;
}

std::string to_json(const NeedleRequest& r) {
  return json{{"model", r.model},
              {"length", r.cell.length},
              {"depth", r.cell.depth},
              {"needles", r.cell.needles},
              {"queried", r.cell.queried},
              {"seed", r.seed},
              {"haystack", r.haystack},
              {"names", to_string(r.names)},
              {"needle_sentence", r.wording.needle},
              {"question", r.wording.question},
              {"logit_bits", r.logit_bits},
              {"interventions", r.interventions}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

// A share on the wire: [answer, noise] (the net shares), then budget, answer_mass, question_mass, noise_mass,
// answer_output, question_output, noise_output, a1_noise_mass, a1_noise_output (null where NaN: a trace
// without values, a softmax map's A1). A server of an earlier version sends the first two only: the rest are
// then NaN.
json share_json(const AttentionShare& s) {
  json a = json::array();
  for (double v : {s.answer, s.noise, s.budget, s.answer_mass, s.question_mass, s.noise_mass, s.answer_output,
                   s.question_output, s.noise_output, s.a1_noise_mass, s.a1_noise_output})
    a.push_back(std::isfinite(v) ? json(v) : json(nullptr));
  return a;
}

AttentionShare share_from(const json& j) {
  if (!j.is_array() || (j.size() != 2 && j.size() != 11) || !j[0].is_number() || !j[1].is_number())
    throw FormatError("needle run: a share must be [answer, noise] or the eleven measures");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double v[11];
  for (size_t i = 0; i < 11; ++i) {
    if (i >= j.size() || j[i].is_null()) {
      v[i] = nan;
    } else if (j[i].is_number()) {
      v[i] = j[i].get<double>();
    } else {
      throw FormatError("needle run: a share's measure is not a number");
    }
  }
  AttentionShare s;
  s.answer = v[0];
  s.noise = v[1];
  s.budget = v[2];
  s.answer_mass = v[3];
  s.question_mass = v[4];
  s.noise_mass = v[5];
  s.answer_output = v[6];
  s.question_output = v[7];
  s.noise_output = v[8];
  s.a1_noise_mass = v[9];
  s.a1_noise_output = v[10];
  return s;
}

json readout_json(const NoiseReadout& r) {
  json per_head = json::array(), per_layer = json::array();
  for (const auto& layer : r.per_head) {
    json l = json::array();
    for (const auto& s : layer) l.push_back(share_json(s));
    per_head.push_back(l);
  }
  for (const auto& s : r.per_layer) per_layer.push_back(share_json(s));
  return {{"layers", r.layers},     {"heads", r.heads},           {"per_head", per_head},
          {"per_layer", per_layer}, {"mean", share_json(r.mean)}, {"ablated", r.ablated}};
}

NoiseReadout readout_from(const json& j) {
  NoiseReadout r;
  const auto ints = [](const json& list) {
    std::vector<int> out;
    if (!list.is_array()) throw FormatError("needle run: a list of layers or heads is not a list");
    for (const json& v : list) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 20))
        throw FormatError("needle run: a layer or head is not a small non-negative integer");
      out.push_back(static_cast<int>(v.get<int64_t>()));
    }
    return out;
  };
  r.layers = ints(j.at("layers"));
  for (const json& h : j.at("heads")) r.heads.push_back(ints(h));
  for (const json& layer : j.at("per_head")) {
    r.per_head.emplace_back();
    for (const json& s : layer) r.per_head.back().push_back(share_from(s));
  }
  for (const json& s : j.at("per_layer")) r.per_layer.push_back(share_from(s));
  r.mean = share_from(j.at("mean"));
  if (j.contains("ablated") && !j.at("ablated").empty()) {  // none: a server of an earlier version
    r.ablated = j.at("ablated").get<std::vector<std::vector<bool>>>();
    if (r.ablated.size() != r.layers.size())
      throw FormatError("needle run: the readout's lists differ in length");
    for (size_t i = 0; i < r.ablated.size(); ++i)
      if (r.ablated[i].size() != r.heads[i].size())
        throw FormatError("needle run: the readout's heads and ablations differ in length");
  }
  if (r.heads.size() != r.layers.size() || r.per_head.size() != r.layers.size() ||
      r.per_layer.size() != r.layers.size())
    throw FormatError("needle run: the readout's lists differ in length");
  for (size_t i = 0; i < r.heads.size(); ++i)
    if (r.heads[i].size() != r.per_head[i].size())
      throw FormatError("needle run: the readout's heads and shares differ in length");
  return r;
}

}  // namespace

std::string needle_run_to_json(const NeedleRun& r, NeedleJson form) {
  json j{{"length", r.cell.length},   {"depth", r.cell.depth}, {"needles", r.cell.needles},
         {"queried", r.cell.queried}, {"seed", r.seed},        {"answered", r.answered},
         {"asked", r.asked}};
  switch (form) {
    case NeedleJson::Protocol:
      j.update({{"tokens", r.tokens},
                {"replies", r.replies},
                {"truths", r.truths},
                {"right", r.right},
                {"attention", readout_json(r.attention)},
                {"answering", readout_json(r.answering)},
                {"seconds", r.seconds},
                {"interventions", r.interventions}});
      break;
    case NeedleJson::Report: {
      json layers = json::array();
      for (size_t k = 0; k < r.attention.layers.size(); ++k)
        layers.push_back({{"layer", r.attention.layers[k]},
                          {"answer", r.attention.per_layer[k].answer},
                          {"noise", r.attention.per_layer[k].noise}});
      j.update({{"tokens", r.tokens},
                {"placed_depth", r.placed_depth},
                {"replies", r.replies},
                {"truths", r.truths},
                {"answer_mass", r.attention.mean.answer_mass},
                {"noise_mass", r.attention.mean.noise_mass},
                {"answer_output", r.attention.mean.answer_output},
                {"noise_output", r.attention.mean.noise_output},
                {"answer_net", r.attention.mean.answer},
                {"noise_net", r.attention.mean.noise},
                {"net_budget", r.attention.mean.budget},
                {"per_layer", layers},
                {"answering_answer_mass", r.answering.mean.answer_mass},
                {"answering_noise_mass", r.answering.mean.noise_mass},
                {"seconds", r.seconds}});
      if (const auto h = strongest_answer_head(r.answering))
        j["answering_strongest_head"] = {{"layer", h->layer},
                                         {"head", h->head},
                                         {"answer", h->share.answer_mass},
                                         {"answer_net", h->share.answer}};
      break;
    }
    case NeedleJson::Episode:
      j.update({{"ids", r.ids},
                {"code", r.code},
                {"answer_span", {r.code_span.begin, r.code_span.end}},
                {"question_rows", {r.question_rows.begin, r.question_rows.end}},
                {"answering_rows", {r.answering_rows.begin, r.answering_rows.end}},
                {"interventions", r.interventions}});
      break;
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

NeedleRun needle_run_from_json(const std::string& text) {
  NeedleRun r;
  // A reply read with the request parser's checked getters (a hostile server is refused, never UB); their
  // RequestError becomes the FormatError of a reply.
  try {
    const json j = json::parse(text);
    if (!j.is_object()) throw FormatError("needle run: not a JSON object");
    const int64_t most = std::numeric_limits<int32_t>::max();
    r.cell.length = get_int(j, "length", 0, most, -1);
    r.cell.depth = get_number(j, "depth", -1.0, 1.0, 0.0);
    r.cell.needles = static_cast<int>(get_int(j, "needles", 0, most, -1));
    r.cell.queried = static_cast<int>(get_int(j, "queried", 0, most, -1));
    r.seed = get_count(j, "seed", 0);
    r.tokens = get_int(j, "tokens", 0, most, -1);
    r.answered = static_cast<int>(get_int(j, "answered", 0, most, -1));
    r.asked = static_cast<int>(get_int(j, "asked", 0, most, -1));
    if (r.cell.length < 0 || r.cell.needles < 0 || r.cell.queried < 0 || r.tokens < 0 || r.answered < 0 ||
        r.asked < 0)
      throw FormatError("needle run: a count is missing");
    r.replies = j.at("replies").get<std::vector<std::string>>();
    r.truths = j.at("truths").get<std::vector<std::string>>();
    if (j.contains("right")) r.right = j.at("right").get<std::vector<bool>>();
    r.attention = readout_from(j.at("attention"));
    r.answering = readout_from(j.at("answering"));
    r.seconds = get_number(j, "seconds", 0.0, 1e12, 0.0);
    r.interventions = get_interventions(j);
  } catch (const json::exception& e) {
    throw FormatError(std::string("needle run: missing or mistyped field (") + e.what() + ")");
  } catch (const RequestError& e) {
    throw FormatError(std::string("needle run: ") + e.what());
  }
  return r;
}

std::string error_json(int status, const std::string& message) {
  return json{{"error", message}, {"status", status}}.dump(-1, ' ', false, json::error_handler_t::replace) +
         "\n";
}

std::string error_message(const std::string& body) {
  try {
    const json j = json::parse(body);
    if (j.is_object() && j.contains("error") && j["error"].is_string()) return j["error"].get<std::string>();
  } catch (const json::exception&) {
  }
  std::string shown = body.substr(0, 200);
  while (!shown.empty() && (shown.back() == '\n' || shown.back() == ' ')) shown.pop_back();
  return shown.empty() ? "(no message)" : shown;
}

}  // namespace difflens::remote
