// RemoteServer: HTTP endpoints over cpp-httplib, one model thread, latest-wins per named client.
#include "app/remote/server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/common/model_line.h"
#include "app/remote/job_queue.h"
#include "app/remote/serve_guard.h"
#include "core/formats/config.h"
#include "core/formats/data.h"
#include "core/formats/error.h"
#include "core/formats/safetensors.h"
#include "core/formats/tiles.h"
#include "core/formats/trace_io.h"
#include "core/model/batch.h"
#include "core/model/capture_plan.h"
#include "core/model/needle.h"

namespace difflens::app {

using nlohmann::json;
using remote::RequestError;

std::string random_token() {
  std::ifstream in("/dev/urandom", std::ios::binary);
  unsigned char bytes[16] = {};
  in.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  if (!in) throw Error("cannot read /dev/urandom for the server's token");
  static const char* hex = "0123456789abcdef";
  std::string t;
  for (unsigned char b : bytes) {
    t += hex[b >> 4];
    t += hex[b & 15];
  }
  return t;
}

namespace {

const char* status_text(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 409:
      return "Conflict";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "";
  }
}

// Each token's [begin, end) bytes in the text, as JSON (capture metadata and tokenize replies).
json offsets_json(const Encoding& e) {
  json offsets = json::array();
  for (const auto& [b, end] : e.offsets) offsets.push_back({b, end});
  return offsets;
}

bool same_token(const std::string& a, const std::string& b) {  // constant time in the given token's length
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

}  // namespace

// The last trace each named client captured with each model, for its /v1/tile requests: the newest few.
class KeptTraces {
 public:
  void keep(const std::string& client, int model, std::shared_ptr<const Trace> trace) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto key = std::make_pair(client, model);
    traces_.remove_if([&](const auto& e) { return e.first == key; });
    traces_.emplace_front(key, std::move(trace));
    while (traces_.size() > kKept) traces_.pop_back();
  }
  std::shared_ptr<const Trace> find(const std::string& client, int model) const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& e : traces_)
      if (e.first == std::make_pair(client, model)) return e.second;
    return nullptr;
  }

 private:
  static constexpr size_t kKept = 4;
  mutable std::mutex mutex_;
  std::list<std::pair<std::pair<std::string, int>, std::shared_ptr<const Trace>>> traces_;
};

struct RemoteServer::Impl {
  std::vector<std::unique_ptr<Model>> models;
  std::vector<std::string> paths;
  ServeOptions options;
  std::unique_ptr<GuardedServer> http;  // made once the options are known
  std::unique_ptr<JobQueue> jobs;       // likewise
  std::thread listener, runner;
  int port = 0;
  bool started = false;
  KeptTraces traces;
  // Haystacks of needle requests, counted with a model's tokenizer: (model, text) -> haystack, the last few.
  // Model thread only.
  std::list<std::pair<std::pair<int, std::string>, std::shared_ptr<const Haystack>>> haystacks;

  void log(const httplib::Request& req, int status, const std::string& what) {
    if (!options.log) return;
    std::fprintf(stderr, "serve: %s %s %s%s -> %d %s\n", req.remote_addr.c_str(), req.method.c_str(),
                 req.path.c_str(), what.empty() ? "" : (" (" + what + ")").c_str(), status,
                 status_text(status));
  }

  // `counted`: the model thread counted it already (a job's outcome).
  void reply_error(const httplib::Request& req, httplib::Response& res, int status,
                   const std::string& message, bool counted = false) {
    res.status = status;
    res.set_content(remote::error_json(status, message), "application/json");
    if (!counted) jobs->count(status);
    log(req, status, message);
  }

  bool authorized(const httplib::Request& req, httplib::Response& res) {
    const std::string h = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (h.rfind(prefix, 0) == 0 && same_token(h.substr(prefix.size()), options.token)) return true;
    reply_error(req, res, 401,
                h.empty()
                    ? "this server needs its token: send 'Authorization: Bearer TOKEN' (serve printed it)"
                    : "wrong token (the one `difflens serve` printed at start is needed)");
    return false;
  }

  const Model& model_at(int index) const {
    if (index < 0 || index >= static_cast<int>(models.size()))
      throw RequestError(404, "no model " + std::to_string(index) + ": this server has " +
                                  std::to_string(models.size()) + " (0.." +
                                  std::to_string(models.size() - 1) + ")");
    return *models[static_cast<size_t>(index)];
  }

  // encode_prompt's refusals (a model without a text tokenizer, text it cannot read) are the client's: 400.
  Encoding encode_request_prompt(int model, const PromptInput& in, const std::string& ids_hint) {
    try {
      return encode_prompt(model_at(model), in, ids_hint, "model " + std::to_string(model));
    } catch (const RequestError&) {
      throw;
    } catch (const Error& e) {
      throw RequestError(400, e.what());
    }
  }

  std::string capture(Job& job, const remote::CaptureRequest& r) {
    const Model& m = model_at(r.model);
    const ModelConfig& c = m.config();
    PromptInput in;
    if (r.prompt) {
      in.text = *r.prompt;
      in.bos = r.bos;
      in.specials = r.specials;
    } else {
      in.ids = r.token_ids;
    }
    Encoding enc = encode_request_prompt(r.model, in, "send 'token_ids'");
    if (!r.prompt) enc.offsets.clear();  // ids sent: no text, so no byte spans (core/FORMATS.md)
    const int64_t T = static_cast<int64_t>(enc.ids.size());
    if (T == 0) throw RequestError(400, "the prompt has no tokens");
    if (T > options.limits.max_tokens)
      throw RequestError(413, "the prompt has " + std::to_string(T) + " tokens; this server takes at most " +
                                  std::to_string(options.limits.max_tokens));
    CaptureOptions o;
    o.keep_maps = r.keep_maps;
    o.layers = r.layers;
    o.heads = r.heads;
    o.keep_logits = r.keep_logits;
    o.keep_hidden = r.keep_hidden;
    o.keep_qkv = r.keep_qkv;
    o.next_token_top_k = r.top_k;
    o.position_top_k = r.position_top_k;
    o.logit_bits = r.logit_bits;
    o.pooled_budget_bytes = r.pooled_budget_bytes;
    if (!r.interventions.empty()) {
      PromptMarks marks;
      marks.answer = {r.answer_begin, r.answer_end};
      marks.query = r.query >= 0 ? r.query : T - 1;
      try {
        o.interventions = resolve_interventions(r.interventions, c, marks, T);
      } catch (const Error& e) {
        throw RequestError(400, std::string("'interventions': ") + e.what());
      }
    }
    // What the reply would carry, refused before any work (plan_capture checks ids, layers and heads).
    const CapturePlan plan =
        plan_capture(c, enc.ids, o, r.logit_bits >= 0 ? r.logit_bits : m.logit_bits(), CaptureMachine{});
    double reply = plan.pooled > 0 ? 0.0 : plan.exact_map_bytes;
    reply += plan.logits_bytes;
    reply += static_cast<double>(T) * (8.0 * r.position_top_k + 8.0);  // every position's prediction
    if (r.keep_hidden)  // the hidden state of each selected layer (every layer without a selection)
      reply +=
          static_cast<double>(T) * static_cast<double>(c.hidden_size) * 4.0 *
          static_cast<double>(r.layers.empty() ? c.num_hidden_layers : static_cast<int64_t>(r.layers.size()));
    if (reply > options.limits.max_reply_bytes)
      throw RequestError(413,
                         "the reply would carry " + std::to_string(static_cast<int64_t>(reply / 1048576)) +
                             " MB of arrays; this server sends at most " +
                             std::to_string(static_cast<int64_t>(options.limits.max_reply_bytes / 1048576)) +
                             " MB (keep fewer layers or heads, or give pooled_budget_bytes)");
    o.on_layer = [&](int64_t layer, int64_t layers) { jobs->set_progress(job, layer, layers); };
    const auto t0 = std::chrono::steady_clock::now();
    auto trace = std::make_shared<Trace>(m.capture(enc.ids, o, &job.cancel));
    if (r.prompt) trace->tokens = enc.pieces;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::string bytes = trace_to_bytes(*trace, {{"offsets", offsets_json(enc).dump()},
                                                {"server_ms", std::to_string(ms)},
                                                {"model", std::to_string(r.model)}});
    if (!job.client.empty()) traces.keep(job.client, r.model, std::move(trace));
    return bytes;
  }

  std::string needle(Job& job, const remote::NeedleRequest& r) {
    Model& m = *models[static_cast<size_t>(r.model)];
    if (!m.tokenizer().can_encode())
      throw RequestError(
          400, "model " + std::to_string(r.model) + " has no text tokenizer: the needle lab needs one");
    validate(NeedleSweep{{r.cell.length}, {r.cell.depth}, {{r.cell.needles, r.cell.queried}}, 1},
             m.config().max_position_embeddings);
    std::shared_ptr<const Haystack> hay;
    const auto key = std::make_pair(r.model, r.haystack);
    for (const auto& e : haystacks)
      if (e.first == key) hay = e.second;
    if (!hay) {
      hay = std::make_shared<const Haystack>(r.haystack, m.tokenizer());
      haystacks.emplace_front(key, hay);
      while (haystacks.size() > 2) haystacks.pop_back();
    }
    const EpisodeBuilder builder(*hay, m.tokenizer(), NeedleSplit::Eval, r.names, r.wording);
    m.set_logit_bits(r.logit_bits);
    try {
      const NeedleRun run = run_needle(m, builder, r.cell, r.seed, &job.cancel, r.interventions);
      m.set_logit_bits(0);
      return remote::needle_run_to_json(run);
    } catch (...) {
      m.set_logit_bits(0);
      throw;
    }
  }

  std::string info() const {
    json j;
    j["protocol"] = remote::kProtocolVersion;
    j["server"] = "difflens serve";
    j["limits"] = json::parse(options.limits.to_json());
    j["models"] = json::array();
    for (size_t i = 0; i < models.size(); ++i) {
      const Model& m = *models[i];
      j["models"].push_back({{"index", i},
                             {"path", paths[i]},
                             {"description", cli::describe_model(m)},
                             {"device", m.device_name()},
                             {"can_encode", m.tokenizer().can_encode()},
                             {"tokenizer_note", m.tokenizer_note()},
                             {"logit_bits", m.logit_bits()},
                             {"config", json::parse(config_to_json_text(m.config()))}});
    }
    return j.dump(1, ' ', false, json::error_handler_t::replace);
  }

  // GET /v1/info: the protocol, the limits and each model.
  void info_request(const httplib::Request& req, httplib::Response& res) {
    res.set_content(info(), "application/json");
    log(req, 200, "");
  }

  // Streams progress lines while `job` waits or runs, then the result line and the reply bytes.
  void stream(const httplib::Request& req, httplib::Response& res, const std::shared_ptr<Job>& job) {
    auto sent = std::make_shared<int64_t>(-2);
    res.set_chunked_content_provider(
        "application/x-difflens-stream",
        [this, job, sent](size_t, httplib::DataSink& sink) {
          const JobNews n = jobs->news(*job, *sent, 100);
          std::string line;
          bool done = false;
          if (n.progressed) {  // the newest progress first, also when the job has finished since
            *sent = n.layer;
            line = n.layer < 0 ? json{{"queued", true}}.dump() + "\n"
                               : json{{"layer", n.layer}, {"layers", n.layers}}.dump() + "\n";
          } else if (n.done) {  // done is final: the job's body and error no longer change
            done = true;
            line = n.status == 200 ? json{{"result", "trace"}, {"bytes", job->body.size()}}.dump() + "\n"
                                   : remote::error_json(n.status, job->error);
          } else {
            line = "{}\n";  // a heartbeat: a client that went away is noticed within 100 ms
          }
          bool ok = sink.write(line.data(), line.size());
          if (ok && done && job->status == 200) {
            const std::string& b = job->body;
            for (size_t at = 0; ok && at < b.size(); at += (1u << 20))
              ok = sink.write(b.data() + at, std::min<size_t>(1u << 20, b.size() - at));
          }
          if (!ok) {
            job->cancel = true;  // the client is gone
            return false;
          }
          if (done) sink.done();
          return true;
        },
        [job](bool success) {
          if (!success) job->cancel = true;
        });
    log(req, 200, job->what + ", streamed");
  }

  void handle_job(const httplib::Request& req, httplib::Response& res, std::shared_ptr<Job> job,
                  bool streamed, const char* content_type) {
    jobs->submit(job);
    if (streamed) return stream(req, res, job);
    jobs->wait(job);
    if (job->status != 200) return reply_error(req, res, job->status, job->error, true);
    res.status = 200;
    res.set_content(std::move(job->body), content_type);
    log(req, 200, job->what);
  }

  std::string client_of(const httplib::Request& req) {
    std::string c = req.get_header_value("X-DiffLens-Client");
    if (c.size() > 128) c.resize(128);
    return c;
  }

  template <typename F>
  void guarded(const httplib::Request& req, httplib::Response& res, F&& f) {
    if (!authorized(req, res)) return;
    try {
      f();
    } catch (const RequestError& e) {
      reply_error(req, res, e.status, e.what());
    } catch (const std::exception& e) {
      reply_error(req, res, 400, user_message(e));
    }
  }

  // GET /v1/tokenizer/N: the SentencePiece file model N was loaded with (the app builds needle prompts with
  // it).
  void tokenizer_file(const httplib::Request& req, httplib::Response& res) {
    const std::string n = req.matches[1];
    const int index = n.size() > 5 ? -1 : std::stoi(n);
    (void)model_at(index);
    const std::filesystem::path file =
        std::filesystem::path(paths[static_cast<size_t>(index)]) / "tokenizer.model";
    std::ifstream in(file, std::ios::binary);
    if (!in) throw RequestError(404, "model " + n + " has no tokenizer.model");
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() > options.limits.max_reply_bytes)
      throw RequestError(413, "tokenizer.model is too large");
    res.set_content(std::move(bytes), "application/octet-stream");
    log(req, 200, "tokenizer");
  }

  // POST /v1/capture: a trace bundle (streamed with progress lines when asked), latest-wins per client.
  void capture_request(const httplib::Request& req, httplib::Response& res) {
    const remote::CaptureRequest r = remote::parse_capture_request(req.body, options.limits);
    (void)model_at(r.model);
    auto job = std::make_shared<Job>();
    job->client = client_of(req);
    job->supersedable = true;
    job->what = "capture, model " + std::to_string(r.model) +
                (r.prompt ? ", " + std::to_string(r.prompt->size()) + " bytes of text"
                          : ", " + std::to_string(r.token_ids.size()) + " ids");
    job->work = [this, r](Job& j) { return capture(j, r); };
    handle_job(req, res, job, r.stream, "application/x-safetensors");
  }

  // POST /v1/tile: exact cells of the client's last trace of a model (answered on the HTTP thread).
  void tile_request(const httplib::Request& req, httplib::Response& res) {
    const remote::TileRequest r = remote::parse_tile_request(req.body, options.limits);
    (void)model_at(r.model);
    const std::shared_ptr<const Trace> trace = traces.find(client_of(req), r.model);
    if (!trace)
      throw RequestError(404, "no trace of model " + std::to_string(r.model) +
                                  " from this client (X-DiffLens-Client) is kept: capture first");
    const AttentionTile t = attention_tile(*trace, r.layer, r.head, r.row0, r.rows, r.col0, r.cols);
    std::vector<TensorToWrite> arrays;
    for (const auto& [name, v] :
         {std::make_pair("A1", &t.a1), std::make_pair("A2", &t.a2), std::make_pair("A", &t.a)})
      if (!v->empty()) arrays.push_back({name, {t.rows, t.cols}, v->data()});
    res.set_content(
        safetensors_bytes(arrays, {{"row0", std::to_string(t.row0)}, {"col0", std::to_string(t.col0)}}),
        "application/x-safetensors");
    log(req, 200, "tile");
  }

  // POST /v1/tokenize: ids, pieces and byte offsets of a text.
  void tokenize_request(const httplib::Request& req, httplib::Response& res) {
    const remote::TokenizeRequest r = remote::parse_tokenize_request(req.body, options.limits);
    (void)model_at(r.model);
    auto job = std::make_shared<Job>();
    job->what = "tokenize";
    job->work = [this, r](Job&) {
      PromptInput in;
      in.text = r.text;
      in.bos = r.bos;
      in.specials = r.specials;
      const Encoding e = encode_request_prompt(r.model, in, "");
      return json{{"ids", e.ids}, {"pieces", e.pieces}, {"offsets", offsets_json(e)}}.dump(
          -1, ' ', false, json::error_handler_t::replace);
    };
    handle_job(req, res, job, false, "application/json");
  }

  // POST /v1/needle: one needle episode of the lab, latest-wins per client.
  void needle_request(const httplib::Request& req, httplib::Response& res) {
    const remote::NeedleRequest r = remote::parse_needle_request(req.body, options.limits);
    (void)model_at(r.model);
    auto job = std::make_shared<Job>();
    job->client = client_of(req);
    job->supersedable = true;
    job->what = "needle episode, " + std::to_string(r.cell.length) + " tokens";
    job->work = [this, r](Job& j) { return needle(j, r); };
    handle_job(req, res, job, false, "application/json");
  }

  // POST /v1/item: one prompt-set item (core/FORMATS.md "Prompt sets") on a model, as `batch` runs it: its
  // record with every head's measures and, with a corrupt prompt, every head's patching. Items queue (none
  // supersedes another): a client streams a prompt set through one loaded model.
  void item_request(const httplib::Request& req, httplib::Response& res) {
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception&) {
      throw RequestError(400, "the body is not JSON: {\"model\": N, \"item\": {...}, \"intervene\": [...]}");
    }
    if (!body.is_object() || !body.contains("item") || !body["item"].is_object())
      throw RequestError(400, "'item' must be a prompt-set item: {\"prompt\": ..., \"answer\": ...}");
    const json& mj = body.contains("model") ? body["model"] : json(0);
    if (!mj.is_number_integer() || mj.get<int64_t>() < 0 || mj.get<int64_t>() > 1000)
      throw RequestError(400, "'model' must be a model's index (GET /v1/info lists them)");
    const int model = static_cast<int>(mj.get<int64_t>());
    (void)model_at(model);
    std::vector<std::string> specs;
    if (body.contains("intervene")) {
      const json& iv = body["intervene"];
      if (!iv.is_array()) throw RequestError(400, "'intervene' must be a list of specs");
      for (const json& x : iv) {
        if (!x.is_string()) throw RequestError(400, "'intervene' must be a list of specs (strings)");
        try {
          specs.push_back(parse_intervention(x.get<std::string>()).text());
        } catch (const Error& e) {
          throw RequestError(400, std::string("'intervene': ") + e.what());
        }
      }
    }
    int64_t line = 1;
    if (body.contains("line")) {
      if (!body["line"].is_number_integer() || body["line"].get<int64_t>() < 1)
        throw RequestError(400, "'line' must be a positive whole number");
      line = body["line"].get<int64_t>();
    }
    BatchItem item;
    try {
      item = parse_batch_item(body["item"].dump(), line);
    } catch (const Error& e) {
      throw RequestError(400, std::string("'item': ") + e.what());
    }
    auto job = std::make_shared<Job>();
    job->client = client_of(req);
    job->supersedable = false;
    job->what = "item " + item.id;
    job->work = [this, model, item, specs](Job& j) {
      const Model& m = *models[static_cast<size_t>(model)];
      const BatchIds ids = batch_ids(m, item);
      const size_t T = ids.prompt.size() + ids.answer.size();
      if (T > static_cast<size_t>(options.limits.max_tokens))
        throw RequestError(413, "the item reads as " + std::to_string(T) +
                                    " tokens; this server takes at most " +
                                    std::to_string(options.limits.max_tokens));
      std::vector<std::string> refused;
      const BatchOutcome o = run_batch_entry(m, item, specs, refused, &j.cancel);
      const std::string name = m.config().name.empty() ? paths[static_cast<size_t>(model)] : m.config().name;
      json out = json::parse(batch_record_json(item, o, name, true));
      out["skipped"] = refused;
      return out.dump(-1, ' ', false, json::error_handler_t::replace);
    };
    handle_job(req, res, job, false, "application/json");
  }

  // cpp-httplib's own refusals (no such endpoint, a body over the limit) in the protocol's error form.
  void http_error(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const std::string m =
        res.status == 404
            ? "no such endpoint: " + req.path +
                  " (GET /v1/info, POST /v1/capture, /v1/tile, /v1/tokenize, /v1/needle, /v1/item)"
        : res.status == 413 ? "the request body is over this server's limit of " +
                                  std::to_string(options.limits.max_request_bytes) + " bytes"
                            : std::string(status_text(res.status));
    res.set_content(remote::error_json(res.status, m), "application/json");
    jobs->count(res.status);
    log(req, res.status, m);
  }

  void internal_error(const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string m = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      m = user_message(e);
    } catch (...) {
    }
    res.status = 500;
    res.set_content(remote::error_json(500, m), "application/json");
    log(req, 500, m);
  }

  void routes() {
    using Handler = void (Impl::*)(const httplib::Request&, httplib::Response&);
    const auto route = [this](Handler h) {
      return [this, h](const httplib::Request& req, httplib::Response& res) {
        guarded(req, res, [&] { (this->*h)(req, res); });
      };
    };
    // Every request: its headers are in (the header deadline ends), and one without the token is refused
    // before its body is read.
    http->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req, res)) return httplib::Server::HandlerResponse::Handled;
      GuardedServer::headers_done();
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http->Get("/v1/info", route(&Impl::info_request));
    http->Get(R"(/v1/tokenizer/(\d+))", route(&Impl::tokenizer_file));
    // POST bodies are read here, whatever their Content-Type: cpp-httplib reads an
    // application/x-www-form-urlencoded body (curl -d's and Python urllib's default) itself and refuses one
    // over 8 KB with a 413 that names no limit of ours. A multipart form is no JSON object: refused, the
    // header named. Over the request limit, reading stops and the reply says so (413): cpp-httplib checks a
    // Content-Length against it but reads a chunked body (Transfer-Encoding: chunked) to its end, so the
    // bytes are counted here as they come.
    const auto post = [this](Handler h) {
      return [this, h](const httplib::Request& req, httplib::Response& res,
                       const httplib::ContentReader& read) {
        if (!authorized(req, res)) return;
        const size_t limit = options.limits.max_request_bytes;
        size_t received = 0;
        bool over = false;
        const auto counted = [&](size_t n) {
          received += n;
          over = received > limit;
          return !over;
        };
        // A body read only in part (over the limit, or one cpp-httplib could not parse): the rest of it is
        // never read, so the connection closes after the reply rather than read it as the next request.
        const auto close_after = [&] {
          res.set_header("Connection", "close");
          GuardedServer::close_after_reply();
        };
        const auto refuse_over = [&] {
          close_after();
          reply_error(req, res, 413,
                      "the request body is over this server's limit of " + std::to_string(limit) + " bytes");
        };
        static const char* const kSendJson =
            "send the request's JSON object as the body (Content-Type: application/json)";
        if (req.is_multipart_form_data()) {
          // Read to its end (within the limit), so that the connection's next request starts where it should.
          const bool whole = read([](const httplib::MultipartFormData&) { return true; },
                                  [&](const char*, size_t n) { return counted(n); });
          if (over) return refuse_over();
          if (!whole) close_after();
          if (!whole && req.get_header_value("Content-Type").find("boundary=") == std::string::npos)
            return reply_error(
                req, res, 400,
                std::string("Content-Type: multipart/form-data without a boundary: ") + kSendJson);
          if (!whole) return;
          return reply_error(req, res, 415, std::string("Content-Type: multipart/form-data: ") + kSendJson);
        }
        httplib::Request with_body = req;
        if (!read([&](const char* data, size_t n) {
              if (!counted(n)) return false;
              with_body.body.append(data, n);
              return true;
            })) {
          if (over) return refuse_over();
          close_after();
          return;
        }
        guarded(with_body, res, [&] { (this->*h)(with_body, res); });
      };
    };
    http->Post("/v1/capture", post(&Impl::capture_request));
    http->Post("/v1/tile", post(&Impl::tile_request));
    http->Post("/v1/tokenize", post(&Impl::tokenize_request));
    http->Post("/v1/needle", post(&Impl::needle_request));
    http->Post("/v1/item", post(&Impl::item_request));
    http->set_error_handler(
        [this](const httplib::Request& req, httplib::Response& res) { http_error(req, res); });
    http->set_exception_handler([this](const httplib::Request& req, httplib::Response& res,
                                       std::exception_ptr ep) { internal_error(req, res, ep); });
  }
};

RemoteServer::RemoteServer(std::vector<Model> models, std::vector<std::string> paths, ServeOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (models.empty()) throw Error("serve: no models to serve");
  if (paths.size() != models.size()) throw Error("serve: one path per model");
  for (Model& m : models) impl_->models.push_back(std::make_unique<Model>(std::move(m)));
  impl_->paths = std::move(paths);
  if (options.token.empty()) options.token = random_token();
  impl_->options = std::move(options);
  GuardLimits g;
  g.max_connections = std::max(1, impl_->options.max_connections);
  g.header_timeout_ms = 1000 * std::max(1, impl_->options.header_timeout_s);
  g.read_timeout_ms = 1000 * std::max(1, impl_->options.read_timeout_s);
  impl_->http = std::make_unique<GuardedServer>(g);
  impl_->http->set_payload_max_length(impl_->options.limits.max_request_bytes);
  impl_->jobs = std::make_unique<JobQueue>(impl_->options.limits.max_active);
  impl_->routes();
}

RemoteServer::~RemoteServer() {
  stop();
}

int RemoteServer::start() {
  Impl& d = *impl_;
  if (d.started) return d.port;
  if (d.options.port == 0) {
    d.port = d.http->bind_to_any_port(d.options.host);
    if (d.port < 0) throw Error("serve: cannot listen on " + d.options.host + " (any port)");
  } else {
    if (!d.http->bind_to_port(d.options.host, d.options.port))
      throw Error("serve: cannot listen on " + d.options.host + ":" + std::to_string(d.options.port) +
                  " (in use by another program? --port picks another)");
    d.port = d.options.port;
  }
  d.http->widen_backlog();
  d.started = true;
  d.runner = std::thread([&d] { d.jobs->run(d.options.threads); });
  d.listener = std::thread([&d] { d.http->listen_after_bind(); });
  return d.port;
}

void RemoteServer::stop() {
  Impl& d = *impl_;
  if (!d.started) return;
  d.jobs->stop();
  d.runner.join();
  d.http->stop();
  d.listener.join();
  d.started = false;
}

const std::string& RemoteServer::token() const {
  return impl_->options.token;
}

int RemoteServer::port() const {
  return impl_->port;
}

std::string RemoteServer::url(int index) const {
  return "remote://" + impl_->options.host + ":" + std::to_string(impl_->port) + "/" + std::to_string(index);
}

ServeCounters RemoteServer::counters() const {
  const JobCounts j = impl_->jobs->counts();
  ServeCounters c;
  c.served = j.served;
  c.refused = j.refused;
  c.cancelled = j.cancelled;
  c.busy_connections = impl_->http->counters().busy;
  c.slow_clients = impl_->http->counters().slow;
  return c;
}

}  // namespace difflens::app
