// RemoteClient: requests to `difflens serve` over cpp-httplib, replies checked as any file DiffLens reads.
#include "app/remote/client.h"

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "core/formats/error.h"
#include "core/formats/safetensors.h"
#include "core/formats/trace_io.h"

namespace difflens::app {

using nlohmann::json;

namespace {

constexpr const char* kForm = "remote://HOST:PORT[/MODEL][?token=TOKEN]";

std::string random_client_id() {
  std::random_device rd;
  std::mt19937_64 rng((static_cast<uint64_t>(rd()) << 32) ^ rd() ^
                      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[32];
  std::snprintf(buf, sizeof buf, "app-%016llx", static_cast<unsigned long long>(rng()));
  return buf;
}

}  // namespace

std::string RemoteAddress::text() const {
  return "remote://" + host + ":" + std::to_string(port) + (model >= 0 ? "/" + std::to_string(model) : "");
}

bool is_remote(const std::string& spec) {
  return spec.rfind("remote://", 0) == 0;
}

std::string without_token(const std::string& spec) {
  if (!is_remote(spec)) return spec;
  const size_t q = spec.find('?');
  return q == std::string::npos ? spec : spec.substr(0, q);
}

RemoteAddress parse_remote(const std::string& spec) {
  if (!is_remote(spec)) throw Error("'" + spec + "' is not a remote model: write " + kForm);
  RemoteAddress a;
  std::string rest = spec.substr(9);
  const size_t q = rest.find('?');
  std::string query = q == std::string::npos ? "" : rest.substr(q + 1);
  rest = rest.substr(0, q);
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  std::string model = slash == std::string::npos ? "" : rest.substr(slash + 1);
  const size_t colon = hostport.rfind(':');
  if (hostport.empty() || colon == 0) throw Error("'" + spec + "': no host (write " + kForm + ")");
  if (colon == std::string::npos) {
    a.host = hostport;
  } else {
    a.host = hostport.substr(0, colon);
    const std::string p = hostport.substr(colon + 1);
    char* end = nullptr;
    const long port = std::strtol(p.c_str(), &end, 10);
    if (p.empty() || *end || port < 1 || port > 65535)
      throw Error("'" + spec + "': the port must be 1..65535 (write " + kForm + ")");
    a.port = static_cast<int>(port);
  }
  if (!model.empty()) {
    char* end = nullptr;
    const long m = std::strtol(model.c_str(), &end, 10);
    if (*end || m < 0 || m > 65535)
      throw Error("'" + spec + "': the model is the server's model index, 0, 1, ... (write " + kForm + ")");
    a.model = static_cast<int>(m);
  }
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string kv = query.substr(0, amp);
    query = amp == std::string::npos ? "" : query.substr(amp + 1);
    if (kv.rfind("token=", 0) == 0)
      a.token = kv.substr(6);
    else if (!kv.empty())
      throw Error("'" + spec + "': unknown parameter '" + kv.substr(0, kv.find('=')) + "' (only token=)");
  }
  if (a.token.empty())
    if (const char* env = std::getenv("DIFFLENS_TOKEN")) a.token = env;
  return a;
}

RemoteClient::RemoteClient(RemoteAddress address, std::string client_id)
    : address_(std::move(address)),
      client_id_(client_id.empty() ? random_client_id() : std::move(client_id)) {}

namespace {

httplib::Headers headers_for(const RemoteAddress& a, const std::string& client) {
  return {{"Authorization", "Bearer " + a.token}, {"X-DiffLens-Client", client}};
}

// Timeouts of every request: connecting 10 s, writing 60 s, reading `read_s` (the server streams heartbeats
// while a capture runs, so a long capture does not trip it).
void set_timeouts(httplib::Client& cli, int read_s) {
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(read_s, 0);
  cli.set_write_timeout(60, 0);
}

[[noreturn]] void transport_failure(const RemoteAddress& a, httplib::Error e) {
  if (e == httplib::Error::Canceled) throw Cancelled();
  std::string why = httplib::to_string(e);
  if (e == httplib::Error::Connection)
    why = "cannot connect (is `difflens serve` running there, or the SSH tunnel open?)";
  else if (e == httplib::Error::Read)
    why = "the connection was lost while reading the reply";
  throw RemoteUnreachable(a.text() + ": " + why);
}

[[noreturn]] void refused(const RemoteAddress& a, int status, const std::string& body) {
  const std::string m = remote::error_message(body);
  if (status == 401) throw Error(a.text() + ": the server refused the token (" + m + ")");
  if (status == 409) throw Cancelled();
  throw Error(a.text() + ": " + m);
}

}  // namespace

std::string RemoteClient::post(const std::string& path, const std::string& body) const {
  httplib::Client cli(address_.host, address_.port);
  set_timeouts(cli, timeout_s_);
  auto res = cli.Post(path.c_str(), headers_for(address_, client_id_), body, "application/json");
  if (!res) transport_failure(address_, res.error());
  if (res->status != 200) refused(address_, res->status, res->body);
  return res->body;
}

std::vector<RemoteModelInfo> RemoteClient::models() const {
  httplib::Client cli(address_.host, address_.port);
  set_timeouts(cli, 30);
  auto res = cli.Get("/v1/info", headers_for(address_, client_id_));
  if (!res) transport_failure(address_, res.error());
  if (res->status != 200) refused(address_, res->status, res->body);
  std::vector<RemoteModelInfo> out;
  try {
    const json j = json::parse(res->body);
    if (j.at("protocol").get<int>() != remote::kProtocolVersion)
      throw Error(address_.text() + ": the server speaks protocol " + j.at("protocol").dump() +
                  ", this app " + std::to_string(remote::kProtocolVersion) + " (update one of them)");
    for (const json& m : j.at("models")) {
      RemoteModelInfo i;
      i.index = m.at("index").get<int>();
      i.path = m.at("path").get<std::string>();
      i.description = m.at("description").get<std::string>();
      i.device = m.at("device").get<std::string>();
      i.can_encode = m.at("can_encode").get<bool>();
      i.tokenizer_note = m.at("tokenizer_note").get<std::string>();
      i.logit_bits = m.at("logit_bits").get<int>();
      i.config = config_from_json_text(m.at("config").dump(), address_.text() + " (config)");
      out.push_back(std::move(i));
    }
  } catch (const json::exception& e) {
    throw Error(address_.text() + ": GET /v1/info is not a DiffLens server's answer (" + e.what() + ")");
  }
  return out;
}

RemoteModelInfo RemoteClient::model_info() const {
  const std::vector<RemoteModelInfo> all = models();
  const int want = address_.model < 0 ? 0 : address_.model;
  for (const auto& m : all)
    if (m.index == want) return m;
  throw Error(address_.text() + ": the server has " + std::to_string(all.size()) + " model(s), no model " +
              std::to_string(want));
}

RemoteCapture RemoteClient::capture(remote::CaptureRequest request, const std::atomic<bool>* cancel,
                                    const std::function<void(int64_t, int64_t)>& progress) const {
  request.model = address_.model < 0 ? request.model : address_.model;
  request.stream = true;
  httplib::Client cli(address_.host, address_.port);
  set_timeouts(cli, timeout_s_);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/capture";
  req.headers = headers_for(address_, client_id_);
  req.set_header("Content-Type", "application/json");
  req.body = remote::to_json(request);
  // The stream: JSON lines (queued, layer i of n, heartbeats), then {"bytes": N, "result": "trace"} and N
  // bytes of the trace, or an error line.
  std::string buffer, trace_bytes, error_line;
  size_t expected = 0;
  bool in_trace = false;
  const auto t0 = std::chrono::steady_clock::now();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (cancel && cancel->load()) return false;
    if (in_trace) {
      trace_bytes.append(data, n);
      return trace_bytes.size() <= expected;
    }
    buffer.append(data, n);
    size_t nl;
    while (!in_trace && (nl = buffer.find('\n')) != std::string::npos) {
      const std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      json j;
      try {
        j = json::parse(line);
      } catch (const json::exception&) {
        error_line = line;
        return false;
      }
      if (!j.is_object()) continue;
      if (j.contains("layer") && progress && j["layer"].is_number_integer() &&
          j["layers"].is_number_integer())
        progress(j["layer"].get<int64_t>(), j["layers"].get<int64_t>());
      if (j.contains("error")) {
        error_line = line;
        return true;
      }
      if (j.contains("result")) {
        if (!j.contains("bytes") || !j["bytes"].is_number_unsigned()) {
          error_line = line;
          return false;
        }
        expected = j["bytes"].get<size_t>();
        in_trace = true;
        trace_bytes.reserve(expected);
        trace_bytes.append(buffer);
        buffer.clear();
      }
    }
    if (buffer.size() > (1u << 20)) {  // no line is that long: not our server
      error_line = buffer.substr(0, 200);
      return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool ok = cli.send(req, res, err);
  if (cancel && cancel->load()) throw Cancelled();
  if (!ok) transport_failure(address_, err);
  if (res.status != 200) refused(address_, res.status, buffer + error_line);
  if (!error_line.empty()) {
    json j;
    try {
      j = json::parse(error_line);
    } catch (const json::exception&) {
      throw Error(address_.text() + ": not a DiffLens server's reply (" + error_line.substr(0, 100) + ")");
    }
    refused(address_, j.value("status", 500), error_line);
  }
  if (!in_trace || trace_bytes.size() != expected)
    throw RemoteUnreachable(address_.text() + ": the reply ended after " +
                            std::to_string(trace_bytes.size()) + " of " + std::to_string(expected) +
                            " bytes (connection lost?)");
  RemoteCapture out;
  out.bytes = trace_bytes.size();
  std::map<std::string, std::string> meta;
  out.trace = std::make_shared<Trace>(trace_from_bytes(trace_bytes, address_.text() + " reply", &meta));
  try {
    if (meta.count("offsets"))
      for (const json& o : json::parse(meta["offsets"]))
        out.offsets.emplace_back(o.at(0).get<size_t>(), o.at(1).get<size_t>());
    if (meta.count("server_ms")) out.server_ms = std::stod(meta["server_ms"]);
  } catch (const std::exception&) {
    throw Error(address_.text() + ": the reply's token offsets are unreadable");
  }
  if (!out.offsets.empty() && out.offsets.size() != out.trace->token_ids.size())
    throw Error(address_.text() + ": the reply has " + std::to_string(out.offsets.size()) +
                " token offsets for " + std::to_string(out.trace->token_ids.size()) + " tokens");
  out.round_trip_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

AttentionTile RemoteClient::tile(const remote::TileRequest& request) const {
  remote::TileRequest r = request;
  r.model = address_.model < 0 ? r.model : address_.model;
  const std::string body = post("/v1/tile", remote::to_json(r));
  const SafetensorsFile f = SafetensorsFile::view(body.data(), body.size(), address_.text() + " tile");
  AttentionTile t;
  t.row0 = r.row0;
  t.col0 = r.col0;
  t.rows = r.rows;
  t.cols = r.cols;
  for (auto [name, v] : {std::make_pair("A1", &t.a1), std::make_pair("A2", &t.a2), std::make_pair("A", &t.a)})
    if (const TensorInfo* info = f.find(name)) {
      if (info->shape != std::vector<int64_t>{r.rows, r.cols})
        throw FormatError(address_.text() + " tile: " + name + " is " + shape_string(info->shape));
      *v = f.read_f32(*info);
    }
  if (t.a.empty()) throw FormatError(address_.text() + " tile: no map A in the reply");
  return t;
}

std::string RemoteClient::fetch_tokenizer(const std::string& cache_root) const {
  const int model = address_.model < 0 ? 0 : address_.model;
  httplib::Client cli(address_.host, address_.port);
  set_timeouts(cli, 60);
  auto res = cli.Get(("/v1/tokenizer/" + std::to_string(model)).c_str(), headers_for(address_, client_id_));
  if (!res) transport_failure(address_, res.error());
  if (res->status == 404) return "";
  if (res->status != 200) refused(address_, res->status, res->body);
  const std::filesystem::path dir =
      std::filesystem::path(cache_root) /
      (address_.host + "_" + std::to_string(address_.port) + "_" + std::to_string(model));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(dir.string() + ": cannot create (" + ec.message() + ")");
  const std::filesystem::path tmp = dir / "tokenizer.model.partial";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(res->body.data(), static_cast<std::streamsize>(res->body.size()));
    if (!out) throw Error(tmp.string() + ": cannot write");
  }
  std::filesystem::rename(tmp, dir / "tokenizer.model", ec);
  if (ec) throw Error((dir / "tokenizer.model").string() + ": cannot write (" + ec.message() + ")");
  return dir.string();
}

NeedleRun RemoteClient::needle(const remote::NeedleRequest& request) const {
  remote::NeedleRequest r = request;
  r.model = address_.model < 0 ? r.model : address_.model;
  return remote::needle_run_from_json(post("/v1/needle", remote::to_json(r)));
}

}  // namespace difflens::app
