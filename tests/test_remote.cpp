// Remote mode: the protocol's parser, traces as bytes, and `difflens serve` on loopback against local
// captures (bit for bit), with wrong tokens, oversized and garbage requests, cancels, two clients, a client
// that leaves mid-stream, and the app's worker driving a remote slot.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "app/remote/client.h"
#include "app/remote/server.h"
#include "app/worker/inference_worker.h"
#include "core/formats/data.h"
#include "core/formats/remote.h"
#include "core/formats/safetensors.h"
#include "core/formats/tiles.h"
#include "core/formats/trace_io.h"
#include "core/model/batch.h"
#include "core/model/needle.h"
#include "tests/helpers.h"

using namespace difflens;
using namespace difflens::app;

namespace {

void require_same_trace(const Trace& a, const Trace& b) {
  REQUIRE(a.token_ids == b.token_ids);
  REQUIRE(a.layers.size() == b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l) {
    INFO("layer " << l);
    const LayerTrace &x = a.layers[l], &y = b.layers[l];
    const auto xs = x.arrays(), ys = y.arrays();
    for (size_t k = 0; k < xs.size(); ++k) {
      INFO("array " << k);
      CHECK(test::same_bits(*xs[k], *ys[k]));  // bit for bit (pooled cells hold NaN)
    }
    CHECK(x.lambda == y.lambda);
    CHECK(x.heads == y.heads);
    CHECK(x.pooled == y.pooled);
    CHECK(x.logit_stats.top == y.logit_stats.top);
    CHECK(x.hidden_stats.histogram.counts == y.hidden_stats.histogram.counts);
  }
  REQUIRE(a.next_token.size() == b.next_token.size());
  for (size_t i = 0; i < a.next_token.size(); ++i) {
    CHECK(a.next_token[i].id == b.next_token[i].id);
    CHECK(a.next_token[i].probability == b.next_token[i].probability);
  }
}

// A server on a free loopback port with a DIFF and a baseline model (seeded: the test builds the same ones).
struct Loopback {
  static constexpr const char* kToken = "0123456789abcdef0123";
  explicit Loopback(remote::Limits limits = {}, int64_t layers = 2, int64_t hidden = 32) {
    ServeOptions o;
    o.port = 0;
    o.token = kToken;
    o.limits = limits;
    o.log = false;
    std::vector<Model> models;
    models.push_back(Model::random(test::tiny_config(AttentionKind::Diff, hidden, layers), 5));
    models.push_back(Model::random(test::tiny_config(AttentionKind::Baseline, hidden, layers), 6));
    server =
        std::make_unique<RemoteServer>(std::move(models), std::vector<std::string>{"diff", "baseline"}, o);
    port = server->start();
  }
  RemoteAddress address(int model, const std::string& token = kToken) const {
    RemoteAddress a;
    a.host = "127.0.0.1";
    a.port = port;
    a.model = model;
    a.token = token;
    return a;
  }
  std::unique_ptr<RemoteServer> server;
  int port = 0;
};

// A loopback server's options: any free port, the test token, no log.
ServeOptions quiet_options() {
  ServeOptions o;
  o.port = 0;
  o.token = Loopback::kToken;
  o.log = false;
  return o;
}

std::vector<Model> one_baseline() {
  std::vector<Model> models;
  models.push_back(Model::random(test::tiny_config(AttentionKind::Baseline), 6));
  return models;
}

remote::CaptureRequest ids_request(std::vector<int64_t> ids) {
  remote::CaptureRequest r;
  r.token_ids = std::move(ids);
  return r;
}

// A raw request, for what the client would never send.
httplib::Result raw_post(int port, const std::string& path, const std::string& body,
                         const std::string& token = Loopback::kToken,
                         const std::string& content_type = "application/json") {
  httplib::Client cli("127.0.0.1", port);
  return cli.Post(path.c_str(), {{"Authorization", "Bearer " + token}}, body, content_type.c_str());
}

}  // namespace

TEST_CASE("remote protocol: a capture request is read back as written, wrong fields are refused by name",
          "[remote]") {
  const remote::Limits limits;
  remote::CaptureRequest r;
  r.model = 1;
  r.prompt = "The cat";
  r.layers = {0, 2};
  r.heads = {1};
  r.keep_qkv = true;
  r.top_k = 7;
  r.position_top_k = 5;
  r.logit_bits = 8;
  r.pooled_budget_bytes = 1 << 20;
  r.stream = true;
  const remote::CaptureRequest b = remote::parse_capture_request(remote::to_json(r), limits);
  CHECK(b.model == 1);
  CHECK(*b.prompt == "The cat");
  CHECK(b.layers == r.layers);
  CHECK(b.heads == r.heads);
  CHECK(b.keep_qkv);
  CHECK(b.top_k == 7);
  CHECK(b.position_top_k == 5);
  CHECK(b.logit_bits == 8);
  CHECK(b.pooled_budget_bytes == (1u << 20));
  CHECK(b.stream);
  CHECK(b.specials == Specials::match);  // absent: matched
  r.specials = Specials::text;
  CHECK(remote::parse_capture_request(remote::to_json(r), limits).specials == Specials::text);
  remote::TokenizeRequest t;
  t.text = "<|eot_id|>";
  t.specials = Specials::text;
  CHECK(remote::parse_tokenize_request(remote::to_json(t), limits).specials == Specials::text);
  CHECK_THROWS_WITH(remote::parse_tokenize_request("{\"text\": \"x\", \"specials\": \"all\"}", limits),
                    Catch::Contains("'specials' is 'all': give \"match\""));

  const auto refused = [&](const std::string& body, int status, const std::string& words) {
    INFO(body);
    try {
      remote::parse_capture_request(body, limits);
      FAIL("accepted");
    } catch (const remote::RequestError& e) {
      CHECK(e.status == status);
      CHECK_THAT(e.what(), Catch::Contains(words));
    }
  };
  refused("{\"promt\": \"x\"}", 400, "unknown field 'promt'");
  refused("{\"prompt\": \"x\", \"token_ids\": [1]}", 400, "exactly one of");
  refused("{}", 400, "exactly one of");
  refused("{\"token_ids\": [1, -2]}", 400, "non-negative");
  refused("{\"token_ids\": [1], \"top_k\": 1.5}", 400, "'top_k' must be an integer");
  refused("{\"token_ids\": [1], \"logit_bits\": 1}", 400, "2 to 32 bits");
  refused("{\"token_ids\": [1], \"position_top_k\": 101}", 400, "position_top_k");
  refused("{\"token_ids\": [1], \"layers\": [0, 99999999999]}", 400, "'layers' must hold integers");
  refused("[1, 2]", 400, "must be a JSON object");
  refused("{\"prompt\": \"x\"", 400, "not valid JSON");
  refused("{\"token_ids\": [1], \"keep_qkv\": \"yes\"}", 400, "true or false");
  refused("{\"prompt\": \"x\", \"specials\": true}", 400, "'specials' must be a string");
  refused("{\"token_ids\": [1], \"specials\": \"text\"}", 400, "'specials' is for a text 'prompt'");
  std::string many = "{\"token_ids\": [";
  for (int i = 0; i <= limits.max_tokens; ++i) many += (i ? ",1" : "1");
  refused(many + "]}", 413, "at most 16384");
  remote::Limits small;
  small.max_request_bytes = 100;
  CHECK_THROWS_WITH(remote::parse_capture_request("{\"prompt\": \"" + std::string(200, 'a') + "\"}", small),
                    Catch::Contains("over this server's limit of 100 bytes"));
}

TEST_CASE("remote protocol: needle requests and runs round-trip, remote:// addresses parse or say the form",
          "[remote]") {
  remote::NeedleRequest n;
  n.model = 1;
  n.cell = {128, 0.25, 2, 1};
  n.seed = 9;
  n.haystack = "Some text. More text.";
  n.names = NameSet::Original;
  n.logit_bits = 6;
  const remote::NeedleRequest m = remote::parse_needle_request(remote::to_json(n), {});
  CHECK(m.cell.length == 128);
  CHECK(m.cell.depth == 0.25);
  CHECK(m.cell.needles == 2);
  CHECK(m.seed == 9);
  CHECK(m.haystack == n.haystack);
  CHECK(m.names == NameSet::Original);
  CHECK(m.logit_bits == 6);
  CHECK_THROWS_WITH(remote::parse_needle_request("{\"haystack\": \"x\", \"needles\": 1, \"queried\": 2}", {}),
                    Catch::Contains("'queried' must not exceed 'needles'"));
  CHECK_THROWS_WITH(remote::parse_needle_request("{\"haystack\": \"x\", \"question\": \"no name\"}", {}),
                    Catch::Contains("{name}"));

  NeedleRun run;
  run.cell = {256, 0.5, 1, 1};
  run.seed = 3;
  run.tokens = 250;
  run.answered = 1;
  run.asked = 1;
  run.replies = {"4823"};
  run.truths = {"4823"};
  run.attention.layers = {0, 1};
  run.attention.heads = {{0, 1}, {0, 1}};
  run.attention.per_head = {{{0.5, 0.25}, {0.125, 0.75}}, {{0.1, 0.2}, {0.3, 0.4}}};
  run.attention.per_layer = {{0.3125, 0.5}, {0.2, 0.3}};
  run.attention.mean = {0.25625, 0.4};
  run.answering = run.attention;
  run.seconds = 1.5;
  const NeedleRun back = remote::needle_run_from_json(remote::needle_run_to_json(run));
  CHECK(back.replies == run.replies);
  CHECK(back.attention.per_head[1][1].noise == 0.4);
  CHECK(back.attention.mean.answer == 0.25625);
  CHECK(back.answering.heads == run.answering.heads);
  CHECK_THROWS_AS(remote::needle_run_from_json("{\"length\": 1}"), FormatError);

  const RemoteAddress a = parse_remote("remote://gpu-box:9000/1?token=abc");
  CHECK(a.host == "gpu-box");
  CHECK(a.port == 9000);
  CHECK(a.model == 1);
  CHECK(a.token == "abc");
  CHECK(a.text() == "remote://gpu-box:9000/1");
  CHECK(parse_remote("remote://localhost").port == 8765);
  CHECK(parse_remote("remote://localhost").model == -1);
  CHECK(without_token("remote://h:1/0?token=secret") == "remote://h:1/0");
  CHECK(without_token("assets/models/diff-small") == "assets/models/diff-small");
  CHECK_THROWS_WITH(parse_remote("remote://h:99999/0"), Catch::Contains("port must be 1..65535"));
  CHECK_THROWS_WITH(parse_remote("remote://h:1/x"), Catch::Contains("model index"));
  CHECK_THROWS_WITH(parse_remote("remote://h:1/0?tokn=1"), Catch::Contains("unknown parameter 'tokn'"));
  CHECK_THROWS_WITH(parse_remote("remote://:80"), Catch::Contains("no host"));
}

TEST_CASE("trace bytes: a trace round-trips through one safetensors buffer, damaged bytes are refused",
          "[remote][trace]") {
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff), 3);
  CaptureOptions o;
  o.keep_qkv = true;
  o.keep_hidden = true;
  const Trace t = m.capture(test::random_ids(37, 259, 2), o);
  std::map<std::string, std::string> meta;
  const std::string bytes = trace_to_bytes(t, {{"note", "x"}});
  const Trace back = trace_from_bytes(bytes, "reply", &meta);
  require_same_trace(t, back);
  CHECK(meta.at("note") == "x");
  CHECK(meta.at("format") == "difflens-trace");
  CHECK_THROWS_WITH(trace_from_bytes(bytes.substr(0, bytes.size() - 5), "reply"), Catch::Contains("reply"));
  CHECK_THROWS_AS(trace_from_bytes("short", "reply"), FormatError);
  std::vector<float> x{1, 2};
  CHECK_THROWS_WITH(trace_from_bytes(safetensors_bytes({{"a", {2}, x.data()}}), "reply"),
                    Catch::Contains("no trace.json"));
}

TEST_CASE("serve: captures on loopback equal local captures bit for bit, exact and pooled, and tiles",
          "[remote]") {
  Loopback lb;
  const Model diff = Model::random(test::tiny_config(AttentionKind::Diff), 5);
  const Model base = Model::random(test::tiny_config(AttentionKind::Baseline), 6);
  RemoteClient c0(lb.address(0)), c1(lb.address(1));
  const std::vector<RemoteModelInfo> info = c0.models();
  REQUIRE(info.size() == 2);
  CHECK(info[0].config.attention == AttentionKind::Diff);
  CHECK(info[1].config.attention == AttentionKind::Baseline);
  CHECK(info[1].path == "baseline");
  CHECK(info[0].can_encode);

  const std::vector<int64_t> ids = test::random_ids(61, 259, 8);
  std::vector<std::pair<int64_t, int64_t>> seen;
  RemoteCapture r = c0.capture(ids_request(ids), nullptr, [&](int64_t l, int64_t n) {
    seen.push_back({l, n});
  });
  require_same_trace(*r.trace, diff.capture(ids));
  // Progress as the stream saw it: layers in order, ending at the last (a fast layer may be skipped).
  REQUIRE_FALSE(seen.empty());
  CHECK(seen.back() == std::make_pair<int64_t, int64_t>(1, 2));
  CHECK(std::is_sorted(seen.begin(), seen.end()));
  CHECK(r.round_trip_ms > 0);
  CHECK(r.bytes > 61 * 61 * 4 * 3 * 2 * 2);
  require_same_trace(*c1.capture(ids_request(ids)).trace, base.capture(ids));

  // Text: the server's tokenizer, the pieces and byte offsets the app underlines tokens with.
  remote::CaptureRequest text;
  text.prompt = "héllo, world";
  text.keep_qkv = true;
  text.layers = {1};
  text.heads = {1};
  const RemoteCapture rt = c0.capture(text);
  const Encoding enc = diff.tokenizer().encode(*text.prompt, true);
  CaptureOptions o;
  o.keep_qkv = true;
  o.layers = {1};
  o.heads = {1};
  Trace local = diff.capture(enc.ids, o);
  require_same_trace(*rt.trace, local);
  CHECK(rt.trace->tokens == enc.pieces);
  CHECK(rt.offsets == enc.offsets);

  // An empty text is BOS alone, as in the app; without BOS nothing is left to run.
  remote::CaptureRequest empty;
  empty.prompt = "";
  CHECK(c0.capture(empty).trace->token_ids == diff.tokenizer().encode("", true).ids);
  empty.bos = false;
  CHECK_THROWS_WITH(c0.capture(empty), Catch::Contains("the prompt has no tokens"));

  // Pooled, then exact tiles of it from the server equal tiles computed here.
  remote::CaptureRequest pooled = ids_request(test::random_ids(300, 259, 9));
  pooled.pooled_budget_bytes = 20000;
  const RemoteCapture rp = c0.capture(pooled);
  CaptureOptions po;
  po.pooled_budget_bytes = 20000;
  const Trace lp = diff.capture(pooled.token_ids, po);
  REQUIRE(lp.layers[0].pooled > 0);
  require_same_trace(*rp.trace, lp);
  remote::TileRequest tr;
  tr.layer = 1;
  tr.head = 1;
  tr.row0 = 200;
  tr.rows = 40;
  tr.col0 = 150;
  tr.cols = 70;
  const AttentionTile remote_tile = c0.tile(tr);
  const AttentionTile local_tile = attention_tile(lp, 1, 1, 200, 40, 150, 70);
  CHECK(remote_tile.a == local_tile.a);
  CHECK(remote_tile.a1 == local_tile.a1);
  CHECK(remote_tile.a2 == local_tile.a2);
  tr.row0 = 290;  // past the end
  CHECK_THROWS_WITH(c0.tile(tr), Catch::Contains("remote://127.0.0.1"));
  RemoteClient stranger(lb.address(0));  // another client has no trace kept
  tr.row0 = 0;
  CHECK_THROWS_WITH(stranger.tile(tr), Catch::Contains("capture first"));
}

TEST_CASE(
    "serve: wrong token, unknown model, oversized and garbage requests are refused and it keeps serving",
    "[remote]") {
  remote::Limits limits;
  limits.max_tokens = 100;
  limits.max_request_bytes = 4096;
  limits.max_reply_bytes = 60000;
  Loopback lb(limits);
  CHECK_THROWS_WITH(RemoteClient(lb.address(0, "not-the-token")).models(),
                    Catch::Contains("refused the token"));
  CHECK_THROWS_WITH(RemoteClient(lb.address(0, "")).models(), Catch::Contains("refused the token"));
  CHECK_THROWS_WITH(RemoteClient(lb.address(5)).model_info(), Catch::Contains("no model 5"));
  CHECK_THROWS_WITH(RemoteClient(lb.address(5)).capture(ids_request({1, 2})), Catch::Contains("no model 5"));
  RemoteClient c(lb.address(0));
  CHECK_THROWS_WITH(c.capture(ids_request(test::random_ids(101, 259, 1))), Catch::Contains("at most 100"));
  CHECK_THROWS_WITH(c.capture(ids_request({1, 2, 999})), Catch::Contains("999"));  // outside the vocabulary
  // 90 tokens of DIFF maps (2 layers x 2 heads x 3 maps x 90 x 90 floats) is over 60 KB: refused before work.
  CHECK_THROWS_WITH(c.capture(ids_request(test::random_ids(90, 259, 1))), Catch::Contains("MB of arrays"));
  remote::CaptureRequest big;
  big.prompt = std::string(5000, 'a');
  CHECK_THROWS_WITH(c.capture(big), Catch::Contains("4096 bytes"));

  auto garbage = raw_post(lb.port, "/v1/capture", "\x01\x02 not json {{{");
  REQUIRE(garbage);
  CHECK(garbage->status == 400);
  CHECK(remote::error_message(garbage->body).find("not valid JSON") != std::string::npos);
  auto nowhere = raw_post(lb.port, "/v1/nothing", "{}");
  REQUIRE(nowhere);
  CHECK(nowhere->status == 404);
  auto unauthorized = raw_post(lb.port, "/v1/capture", "{\"token_ids\": [1]}", "guess");
  REQUIRE(unauthorized);
  CHECK(unauthorized->status == 401);
  // Still serving.
  CHECK(c.capture(ids_request({1, 2, 3})).trace->length() == 3);
  CHECK(lb.server->counters().refused >= 9);
}

TEST_CASE("serve: a JSON body is read whatever its Content-Type, curl -d's form type over 8 KB included",
          "[remote]") {
  remote::Limits limits;
  limits.max_request_bytes = 64 * 1024;
  Loopback lb(limits);
  // A 20 KB body: the prompt's padding is JSON whitespace (cpp-httplib once refused form-encoded bodies over
  // 8 KB with a 413 naming the server's 64 KB limit).
  const std::string body = "{\"token_ids\": [1, 2, 3]" + std::string(20000, ' ') + "}";
  for (const char* type : {"application/json", "application/x-www-form-urlencoded", "text/plain", ""}) {
    INFO("Content-Type: " << type);
    auto r = raw_post(lb.port, "/v1/tokenize", "{\"text\": \"The cat\"" + std::string(20000, ' ') + "}",
                      Loopback::kToken, type);
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->body.find("\"ids\"") != std::string::npos);
    auto c = raw_post(lb.port, "/v1/capture", body, Loopback::kToken, type);
    REQUIRE(c);
    CHECK(c->status == 200);
  }
  // Over the server's own limit, whatever the type: 413 with that limit.
  for (const char* type : {"application/json", "application/x-www-form-urlencoded"}) {
    auto big = raw_post(lb.port, "/v1/capture", std::string(70000, ' '), Loopback::kToken, type);
    REQUIRE(big);
    CHECK(big->status == 413);
    CHECK(remote::error_message(big->body).find("limit of 65536 bytes") != std::string::npos);
  }
  // A multipart form holds no JSON object: refused, the header named.
  auto form = raw_post(lb.port, "/v1/capture", "--b\r\n\r\n{}\r\n--b--\r\n", Loopback::kToken,
                       "multipart/form-data; boundary=b");
  REQUIRE(form);
  CHECK(form->status == 415);
  CHECK(remote::error_message(form->body).find("multipart/form-data") != std::string::npos);
  // A multipart type without a boundary: 400, the reason named.
  auto no_boundary = raw_post(lb.port, "/v1/capture", "{}", Loopback::kToken, "multipart/form-data");
  REQUIRE(no_boundary);
  CHECK(no_boundary->status == 400);
  CHECK(remote::error_message(no_boundary->body).find("without a boundary") != std::string::npos);
  // Without the token the body is not read, whatever its type.
  auto stranger = raw_post(lb.port, "/v1/capture", body, "guess", "application/x-www-form-urlencoded");
  REQUIRE(stranger);
  CHECK(stranger->status == 401);
}

TEST_CASE("serve: a newer request of the same client cancels the older, two clients run side by side",
          "[remote]") {
  Loopback lb({}, 6, 64);
  const std::vector<int64_t> ids = test::random_ids(400, 259, 4);
  RemoteClient first(lb.address(0), "client-a"), again(lb.address(0), "client-a"),
      other(lb.address(1), "client-b");
  std::atomic<bool> started{false};
  std::string first_outcome;
  std::thread t([&] {
    try {
      first.capture(ids_request(ids), nullptr, [&](int64_t, int64_t) { started = true; });
      first_outcome = "finished";
    } catch (const Cancelled&) {
      first_outcome = "cancelled";
    } catch (const std::exception& e) {
      first_outcome = e.what();
    }
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  RemoteCapture second;
  std::thread u([&] { second = other.capture(ids_request(ids)); });  // another client: not cancelled
  const RemoteCapture latest = again.capture(ids_request({5, 6, 7}));
  t.join();
  u.join();
  CHECK(first_outcome == "cancelled");
  CHECK(latest.trace->length() == 3);
  CHECK(second.trace->length() == 400);
  CHECK(lb.server->counters().cancelled >= 1);
}

TEST_CASE("serve: a client that cancels or leaves mid-stream stops its capture, the server goes on",
          "[remote]") {
  Loopback lb({}, 8, 64);
  RemoteClient c(lb.address(0));
  std::atomic<bool> cancel{false};
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(c.capture(ids_request(test::random_ids(500, 259, 2)), &cancel,
                            // The first progress line, whichever layer it names: the server reports the
                            // layer running when its writer wakes, so a loaded machine may skip layer 1.
                            [&](int64_t, int64_t) { cancel = true; }),
                  Cancelled);
  // A raw client reads the first progress line and hangs up.
  {
    httplib::Client cli("127.0.0.1", lb.port);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/capture";
    req.headers = {{"Authorization", std::string("Bearer ") + Loopback::kToken}};
    req.body = "{\"token_ids\": [" + std::string("1,2,3,4,5,6,7,8,9,10") + "], \"stream\": true}";
    int chunks = 0;
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };
    httplib::Response res;
    httplib::Error err;
    CHECK_FALSE(cli.send(req, res, err));
    CHECK(err == httplib::Error::Canceled);
  }
  // Both stopped early, and the server answers the next request.
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  CHECK(c.capture(ids_request({1, 2})).trace->length() == 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(lb.server->counters().cancelled >= 1);
}

TEST_CASE("serve: requests beyond max_active are refused at once with 'busy'", "[remote]") {
  remote::Limits limits;
  limits.max_active = 1;
  Loopback lb(limits, 8, 64);
  RemoteClient slow(lb.address(0), "slow"), quick(lb.address(1), "quick");
  std::atomic<bool> started{false};
  std::thread t([&] {
    slow.capture(ids_request(test::random_ids(500, 259, 1)), nullptr,
                 [&](int64_t, int64_t) { started = true; });
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_THROWS_WITH(quick.capture(ids_request({1, 2})), Catch::Contains("busy"));
  t.join();
  CHECK(quick.capture(ids_request({1, 2})).trace->length() == 2);
}

TEST_CASE("the app's worker runs a remote slot as a local one, a lost server leaves the last trace on screen",
          "[remote][worker]") {
  auto lb = std::make_unique<Loopback>();
  const std::string spec = "remote://127.0.0.1:" + std::to_string(lb->port) + "?token=" + Loopback::kToken;
  InferenceWorker w({}, 1);
  w.load(0, spec);  // model 0: the slot's index
  w.load(1, spec);  // model 1
  w.wait_idle();
  const WorkerStatus st = w.status();
  CHECK(st.slots[0].error.empty());
  CHECK(st.slots[0].loaded);
  CHECK(st.slots[0].path == "remote://127.0.0.1:" + std::to_string(lb->port) + "/0");
  CHECK_THAT(st.slots[1].description, Catch::Contains("baseline on 127.0.0.1"));
  CHECK(st.slots[1].description.find(Loopback::kToken) == std::string::npos);
  CaptureOptions o;
  o.keep_qkv = true;
  w.run("The quick brown fox", o);
  w.wait_idle();
  std::optional<RunResult> r = w.take_result();
  REQUIRE(r);
  REQUIRE(r->traces[0]);
  REQUIRE(r->traces[1]);
  const Model diff = Model::random(test::tiny_config(AttentionKind::Diff), 5);
  const Encoding enc = diff.tokenizer().encode("The quick brown fox", true);
  require_same_trace(*r->traces[0], diff.capture(enc.ids, o));
  CHECK(r->offsets[0] == enc.offsets);
  CHECK(r->round_trip_ms[0] > 0);
  CHECK(r->notes[0].empty());

  lb.reset();  // the server goes away
  w.run("The quick brown fox jumps", o);
  w.wait_idle();
  r = w.take_result();
  REQUIRE(r);
  CHECK_THAT(r->notes[0], Catch::Contains("cannot connect") && Catch::Contains("showing the last trace"));
  REQUIRE(r->traces[0]);
  CHECK(r->traces[0]->length() == static_cast<int64_t>(enc.ids.size()));  // the last one
  CHECK(r->errors[0].empty());

  w.load(0, "remote://127.0.0.1:1/0?token=x");  // nothing listens there
  w.wait_idle();
  CHECK_THAT(w.status().slots[0].error, Catch::Contains("cannot connect"));
}

namespace {

// The bundled pair served in this process (what `difflens serve` with no --models does).
std::unique_ptr<RemoteServer> serve_bundled(int& port) {
  const std::string root = std::string(DIFFLENS_SOURCE_DIR) + "/assets/models/";
  std::vector<Model> models;
  models.push_back(Model::load(root + "diff-small", DeviceChoice::Cpu));
  models.push_back(Model::load(root + "baseline-small", DeviceChoice::Cpu));
  ServeOptions o;
  o.port = 0;
  o.token = Loopback::kToken;
  o.log = false;
  o.threads = 1;
  auto server = std::make_unique<RemoteServer>(
      std::move(models), std::vector<std::string>{root + "diff-small", root + "baseline-small"}, o);
  port = server->start();
  return server;
}

}  // namespace

TEST_CASE("serve: a needle-lab episode run on the server equals the same episode run here",
          "[remote][needle]") {
  int port = 0;
  const auto server = serve_bundled(port);
  const Model diff =
      Model::load(std::string(DIFFLENS_SOURCE_DIR) + "/assets/models/diff-small", DeviceChoice::Cpu);
  const std::string text = test::read_all(std::string(DIFFLENS_SOURCE_DIR) + "/assets/haystack.txt");
  RemoteAddress a;
  a.host = "127.0.0.1";
  a.port = port;
  a.model = 0;
  a.token = Loopback::kToken;
  remote::NeedleRequest q;
  q.cell = {128, 0.5, 2, 1};
  q.seed = 3;
  q.haystack = text;
  const NeedleRun got = RemoteClient(a).needle(q);
  const Haystack hay(text, diff.tokenizer());
  const EpisodeBuilder builder(hay, diff.tokenizer(), NeedleSplit::Eval);
  const NeedleRun want = run_needle(diff, builder, q.cell, q.seed);
  CHECK(got.tokens == want.tokens);
  CHECK(got.replies == want.replies);
  CHECK(got.truths == want.truths);
  CHECK(got.answered == want.answered);
  CHECK(got.attention.mean.answer == want.attention.mean.answer);  // JSON keeps doubles exactly
  CHECK(got.answering.per_layer.size() == want.answering.per_layer.size());
  // Under interventions: the server runs the episode as run_needle does here.
  q.interventions = {"knockout=not-answer", "lambda:1=0"};
  const NeedleRun got_edited = RemoteClient(a).needle(q);
  const NeedleRun want_edited = run_needle(diff, builder, q.cell, q.seed, nullptr, q.interventions);
  CHECK(got_edited.interventions == q.interventions);
  CHECK(got_edited.replies == want_edited.replies);
  CHECK(got_edited.attention.mean.answer == want_edited.attention.mean.answer);
  CHECK(got_edited.attention.mean.answer != want.attention.mean.answer);
  q.interventions.clear();
  q.cell.length = 100000;
  CHECK_THROWS_WITH(RemoteClient(a).needle(q), Catch::Contains("16384"));
}

TEST_CASE("serve: a prompt-set item run on the server is the batch record made here, with heads and patching",
          "[remote][batch]") {
  int port = 0;
  const auto server = serve_bundled(port);
  const Model diff =
      Model::load(std::string(DIFFLENS_SOURCE_DIR) + "/assets/models/diff-small", DeviceChoice::Cpu);
  const std::string prompt =
      "The secret code of Thomas is 7182. The secret code of Rachel is 2233. Q: What is the secret code of "
      "Thomas? A: The secret code of Thomas is";
  std::string corrupt = prompt;
  corrupt.replace(corrupt.find("7182"), 4, "4821");
  const nlohmann::json item = {{"id", "t"},          {"prompt", prompt},          {"answer", " 7182"},
                               {"corrupt", corrupt}, {"corrupt_answer", " 4821"}, {"topic", "codes"}};
  const nlohmann::json body = {{"model", 0}, {"item", item}, {"intervene", {"lambda:1=0"}}, {"line", 4}};
  const auto res = raw_post(port, "/v1/item", body.dump());
  REQUIRE(res);
  INFO(res->body);
  REQUIRE(res->status == 200);
  const nlohmann::json got = nlohmann::json::parse(res->body);
  // The same item here, as `batch` runs it.
  const BatchItem here = parse_batch_item(item.dump(), 4);
  std::vector<std::string> refused;
  const BatchOutcome o = run_batch_entry(diff, here, {"lambda:1=0"}, refused);
  nlohmann::json want = nlohmann::json::parse(batch_record_json(here, o, "diff-small", true));
  want["skipped"] = nlohmann::json::array();
  CHECK(got == want);  // JSON keeps doubles exactly
  CHECK(got["line"] == 4);
  CHECK(got["interventions"] == "lambda:1=0");
  CHECK(got["heads"].size() == 16);
  CHECK(got["patch"]["heads"].size() == 16);
  CHECK(got["tags"]["topic"] == "codes");
  // The baseline has no λ: it runs without it and says so.
  nlohmann::json base = body;
  base["model"] = 1;
  const auto b = raw_post(port, "/v1/item", base.dump());
  REQUIRE(b);
  CHECK(b->status == 200);
  CHECK_THAT(b->body, Catch::Contains("skipped") && Catch::Contains("lambda:1=0"));
  // Refusals: a bad item by its field, no such model, a bad spec.
  for (const auto& [payload, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"model": 0, "item": {"prompt": "x"}})", "'item': line 1: 'answer' is missing"},
           {R"({"model": 7, "item": {"prompt": "x", "answer": "y"}})", "no model 7"},
           {R"({"model": 0, "item": {"prompt": "x", "answer": "y"}, "intervene": ["lambda:x=0"]})",
            "'intervene'"},
           {R"({"model": 0})", "'item' must be a prompt-set item"},
           {"[1", "the body is not JSON"}}) {
    const auto r = raw_post(port, "/v1/item", payload);
    REQUIRE(r);
    INFO(payload);
    CHECK(r->status >= 400);
    CHECK_THAT(r->body, Catch::Contains(message));
  }
}

TEST_CASE("gui: the app on remote:// slots shows the first screen of local models, maps equal byte for byte",
          "[gui][remote]") {
  if (!std::getenv("DISPLAY")) test::skip("no X display (scripts/test runs the suite under xvfb-run)");
  int port = 0;
  const auto server = serve_bundled(port);
  test::ScratchDir dir("remote-gui");
  const std::string spec = "remote://127.0.0.1:" + std::to_string(port) + "/%d?token=" + Loopback::kToken;
  char models[512];
  std::snprintf(models, sizeof models, ("'" + spec + "," + spec + "'").c_str(), 0, 1);
  auto app = [&](const std::string& extra, const std::string& name) {
    const std::string log = (dir / (name + ".log")).string();
    const std::string cmd = std::string(DIFFLENS_EXE) + " " + extra + " --size 1280x800 --threads 1 " +
                            "--exit-after-frames 2 --screenshot " + (dir / (name + ".png")).string() +
                            " --export-all --export-dir " + (dir / name).string() + " > " + log + " 2>&1";
    const int status = std::system(cmd.c_str());
    return std::make_pair(status, test::read_all(log));
  };
  const auto [local_status, local] = app("", "local");
  const auto [remote_status, remote_out] = app(std::string("--models ") + models, "remote");
  INFO(local << "\n----\n" << remote_out);
  REQUIRE(local_status == 0);
  REQUIRE(remote_status == 0);
  CHECK(remote_out.find("251 tokens") != std::string::npos);  // the held-out needle episode, as locally
  CHECK(local.find("251 tokens") != std::string::npos);
  CHECK(remote_out.find(Loopback::kToken) == std::string::npos);  // the token is never printed
  size_t compared = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir / "local")) {
    if (e.path().extension() != ".npy") continue;
    const std::filesystem::path other = dir / "remote" / e.path().filename();
    INFO(e.path().filename());
    REQUIRE(std::filesystem::exists(other));
    CHECK(test::read_all(e.path()) == test::read_all(other));
    ++compared;
  }
  CHECK(compared >= 4);  // A1, A2, A of DIFF and the baseline's A
}

TEST_CASE("serve: a stalled client is dropped at the header deadline, a silent server times its client out",
          "[remote]") {
  ServeOptions o = quiet_options();
  o.read_timeout_s = 1;
  o.header_timeout_s = 1;  // half a request: the headers never complete
  RemoteServer server(one_baseline(), {"baseline"}, o);
  const int port = server.start();
  // Half a request, then nothing: the server closes the connection (read returns 0) after about a second.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  const std::string partial = "POST /v1/capture HTTP/1.1\r\nHost: x\r\n";
  REQUIRE(::send(fd, partial.data(), partial.size(), 0) == static_cast<ssize_t>(partial.size()));
  const auto t0 = std::chrono::steady_clock::now();
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  char buf[256];
  const ssize_t got = ::recv(fd, buf, sizeof buf, 0);  // 0: closed (or an error reply, then closed)
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(fd);
  CHECK(got >= 0);
  CHECK(waited < 5);
  // Meanwhile and after, the server answers.
  RemoteAddress a;
  a.host = "127.0.0.1";
  a.port = port;
  a.model = 0;
  a.token = Loopback::kToken;
  CHECK(RemoteClient(a).capture(ids_request({1, 2, 3})).trace->length() == 3);

  // A "server" that accepts and never answers: the client gives up after its timeout with a message.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(silent, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0);
  REQUIRE(::listen(silent, 4) == 0);
  socklen_t len = sizeof any;
  REQUIRE(::getsockname(silent, reinterpret_cast<sockaddr*>(&any), &len) == 0);
  a.port = ntohs(any.sin_port);
  RemoteClient patient(a);
  patient.set_timeout(1);
  const auto t1 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(patient.capture(ids_request({1, 2})), RemoteUnreachable);
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(5));
  ::close(silent);
}

TEST_CASE("serve: capture --model remote:// prints what a local capture prints (λ, statistics, next tokens)",
          "[remote][cli]") {
  const Loopback lb;
  test::ScratchDir dir("remotecli");
  const std::string log = (dir / "cli.log").string();
  const std::string cmd = std::string(DIFFLENS_EXE) +
                          " capture --model 'remote://127.0.0.1:" + std::to_string(lb.port) +
                          "/0?token=" + Loopback::kToken + "' --token-ids 1,5,6,7 --out '" +
                          (dir / "t").string() + "/' > '" + log + "' 2>&1";
  const int raw = std::system(cmd.c_str());
  const std::string out = test::read_all(log);
  INFO(out);
  REQUIRE(WIFEXITED(raw));
  CHECK(WEXITSTATUS(raw) == 0);
  for (const char* line :
       {"capture   ", "lambda    L0=", "|logits|  top-1", "|hidden|  top-1", "next      ", "wrote     "})
    CHECK(out.find(line) != std::string::npos);
  CHECK(out.find((dir / "t/trace.json").string()) != std::string::npos);
  CHECK(out.find("t//") == std::string::npos);
}

namespace {

// A TCP connection to the loopback server that sends `text` (maybe half a request) and keeps the socket.
int connect_and_send(int port, const std::string& text) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  if (!text.empty()) (void)::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
  return fd;
}

// What the server sends on `fd` until it closes it or `seconds` pass, and how long that took.
std::pair<std::string, double> read_until_closed(int fd, double seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  timeval limit{static_cast<time_t>(seconds), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  std::string got;
  char buf[1024];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  return {got, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace

TEST_CASE("serve: a chunked body is held to the request limit as it comes, a small one is read whole",
          "[remote]") {
  remote::Limits limits;
  limits.max_request_bytes = 64 * 1024;
  Loopback lb(limits);
  const std::string head = std::string("POST /v1/tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
                           Loopback::kToken + "\r\nContent-Type: application/json\r\n" +
                           "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
  const auto chunk = [](const std::string& data) {
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    return size + data + "\r\n";
  };
  // Within the limit: two chunks make one JSON object.
  {
    const int fd =
        connect_and_send(lb.port, head + chunk("{\"text\": ") + chunk("\"The cat\"}") + "0\r\n\r\n");
    REQUIRE(fd >= 0);
    const auto [reply, took] = read_until_closed(fd, 10);
    ::close(fd);
    INFO(reply);
    CHECK(reply.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(reply.find("\"ids\"") != std::string::npos);
  }
  // 40 chunks of 4 KB (160 KB) and no end, from a keep-alive client whose body holds whole requests: the
  // server answers 413 naming its limit once past 64 KB and closes the connection, without waiting for the
  // rest and without reading the rest as requests (one reply, no 200 for the GET inside the body).
  const std::string inner = std::string("GET /v1/info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") +
                            Loopback::kToken + "\r\n\r\n";
  const auto count_replies = [](const std::string& text) {
    size_t n = 0;
    for (size_t p = text.find("HTTP/1.1 "); p != std::string::npos; p = text.find("HTTP/1.1 ", p + 1)) ++n;
    return n;
  };
  {
    std::string keep_alive = head;
    keep_alive.erase(keep_alive.find("Connection: close\r\n"), 19);
    std::string sent = keep_alive, filler;
    while (filler.size() < 4096) filler += inner;
    for (int i = 0; i < 40; ++i) sent += chunk(filler);
    const int fd = connect_and_send(lb.port, sent);
    REQUIRE(fd >= 0);
    const auto [reply, took] = read_until_closed(fd, 10);
    ::close(fd);
    INFO(reply);
    CHECK(reply.rfind("HTTP/1.1 413", 0) == 0);
    CHECK(reply.find("limit of 65536 bytes") != std::string::npos);
    CHECK(count_replies(reply) == 1);
    CHECK(took < 5);
  }
  // A multipart type without a boundary, keep-alive, a request inside the body: one 400 naming it, closed.
  {
    const std::string body = inner + inner;
    const std::string sent =
        std::string("POST /v1/capture HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") + Loopback::kToken +
        "\r\nContent-Type: multipart/form-data\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\n\r\n" + body;
    const int fd = connect_and_send(lb.port, sent);
    REQUIRE(fd >= 0);
    const auto [reply, took] = read_until_closed(fd, 10);
    ::close(fd);
    INFO(reply);
    CHECK(reply.rfind("HTTP/1.1 400", 0) == 0);
    CHECK(reply.find("without a boundary") != std::string::npos);
    CHECK(count_replies(reply) == 1);
    CHECK(took < 5);
  }
  // Still serving.
  CHECK(RemoteClient(lb.address(0)).capture(ids_request({1, 2, 3})).trace->length() == 3);
}

TEST_CASE("serve: 64 stalled connections leave a good request answered in under a second", "[remote]") {
  const Loopback lb;
  std::vector<int> stalled;
  // Opened in a burst: the listen backlog holds them all (at 5, the rest would wait out SYN retries, 1 s+).
  const auto c0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 64; ++i) {
    const int fd = connect_and_send(lb.port, "POST /v1/capture HTTP/1.1\r\nHost: x\r\n");
    REQUIRE(fd >= 0);
    stalled.push_back(fd);
  }
  CHECK(std::chrono::steady_clock::now() - c0 < std::chrono::milliseconds(900));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // every one accepted and waiting
  const auto t0 = std::chrono::steady_clock::now();
  const RemoteClient client(lb.address(0));
  CHECK(client.model_info().config.num_hidden_layers == 2);
  CHECK(client.capture(ids_request({1, 2, 3})).trace->length() == 3);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(took < 1.0);
  for (int fd : stalled) ::close(fd);
}

TEST_CASE("serve: past --max-connections a connection is answered 503 at once, a slow header is dropped",
          "[remote]") {
  ServeOptions o = quiet_options();
  o.max_connections = 4;
  o.header_timeout_s = 1;
  RemoteServer server(one_baseline(), {"baseline"}, o);
  const int port = server.start();
  std::vector<int> held;
  for (int i = 0; i < 4; ++i) held.push_back(connect_and_send(port, "GET /v1/info HTTP/1.1\r\n"));
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  // The fifth: a 503 without sending a byte, at once (well before the 1 s header deadline frees the others).
  const int fifth = connect_and_send(port, "");
  REQUIRE(fifth >= 0);
  const auto [reply, waited] = read_until_closed(fifth, 5);
  ::close(fifth);
  CHECK(reply.rfind("HTTP/1.1 503 Service Unavailable\r\n", 0) == 0);
  CHECK(reply.find("4 connections are open (this server's --max-connections)") != std::string::npos);
  CHECK(waited < 0.5);
  CHECK(server.counters().busy_connections == 1);
  for (int fd : held) ::close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // A slowloris: one byte of the request every 300 ms is dropped at the 1 s header deadline.
  const int slow = connect_and_send(port, "G");
  REQUIRE(slow >= 0);
  std::atomic<bool> go{true};
  std::thread drip([&] {
    const std::string rest = "ET /v1/info HTTP/1.1\r\nHost: x\r\nX-Long: aaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    for (char c : rest) {
      if (!go) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (::send(slow, &c, 1, MSG_NOSIGNAL) != 1) break;
    }
  });
  const auto [dropped, after] = read_until_closed(slow, 10);
  go = false;
  drip.join();
  ::close(slow);
  CHECK(after < 2.5);                                        // 1 s after its first byte, not 20 s later
  CHECK(dropped.find("HTTP/1.1 200") == std::string::npos);  // never served
  CHECK(server.counters().slow_clients >= 1);
  // A request without the token is refused before its (announced, never sent) body is read.
  const int noauth =
      connect_and_send(port, "POST /v1/capture HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n");
  const auto [refused, t401] = read_until_closed(noauth, 5);
  ::close(noauth);
  CHECK(refused.rfind("HTTP/1.1 401", 0) == 0);
  CHECK(t401 < 0.5);
  // And a good request is served as ever.
  RemoteAddress a;
  a.host = "127.0.0.1";
  a.port = port;
  a.token = Loopback::kToken;
  CHECK(RemoteClient(a).capture(ids_request({1, 2, 3})).trace->length() == 3);
}

// `serve --device cuda`: the server's models on the GPU answer captures equal to the CPU's (the kernels
// differ, so within 1e-5, not bit for bit), exact and pooled.
TEST_CASE("serve on CUDA: captures on loopback equal the CPU's within 1e-5, exact and pooled",
          "[remote][gpu]") {
  if (!cuda_available()) test::skip("no CUDA device (this LibTorch build or this machine has no GPU)");
  const Model cpu = Model::random(test::tiny_config(AttentionKind::Diff, 32, 2), 5);
  std::vector<Model> models;
  models.push_back(Model::from_tensors(cpu.config(), cpu.tensors(), DeviceChoice::Cuda));
  RemoteServer server(std::move(models), std::vector<std::string>{"diff"}, quiet_options());
  RemoteAddress address;
  address.host = "127.0.0.1";
  address.port = server.start();
  address.model = 0;
  address.token = Loopback::kToken;
  RemoteClient client(address);
  for (const size_t budget : {size_t{0}, size_t{20000}}) {
    INFO("pooled budget " << budget);
    remote::CaptureRequest request = ids_request(test::random_ids(budget ? 300 : 61, 259, 8));
    request.pooled_budget_bytes = budget;
    const RemoteCapture r = client.capture(request);
    CaptureOptions o;
    o.pooled_budget_bytes = budget;
    const Trace local = cpu.capture(request.token_ids, o);
    REQUIRE(r.trace->layers.size() == local.layers.size());
    CHECK((budget == 0) == (local.layers[0].pooled == 0));
    for (size_t l = 0; l < local.layers.size(); ++l) {
      const auto xs = r.trace->layers[l].arrays(), ys = local.layers[l].arrays();
      REQUIRE(xs.size() == ys.size());
      for (size_t k = 0; k < xs.size(); ++k) {
        INFO("layer " << l << " array " << k);
        REQUIRE(xs[k]->shape == ys[k]->shape);
        size_t differ = 0;
        for (size_t i = 0; i < ys[k]->data.size(); ++i) {
          const float x = xs[k]->data[i], y = ys[k]->data[i];
          differ += std::isnan(y) ? !std::isnan(x) : !(std::fabs(x - y) <= 1e-5f);
        }
        CHECK(differ == 0);
      }
      CHECK(r.trace->layers[l].lambda == Approx(local.layers[l].lambda).margin(1e-5));
    }
  }
}

TEST_CASE("serve: captures and needle episodes under interventions equal local ones, bad specs are refused",
          "[remote][interventions]") {
  Loopback lb;
  const Model diff = Model::random(test::tiny_config(AttentionKind::Diff), 5);
  RemoteClient c0(lb.address(0)), c1(lb.address(1));
  const std::vector<int64_t> ids = test::random_ids(40, 259, 8);
  remote::CaptureRequest q = ids_request(ids);
  q.interventions = {"lambda:0:1=0", "knockout=not-noise", "ablate:1:0=mean"};
  q.answer_begin = 5;
  q.answer_end = 9;
  q.query = 30;
  const RemoteCapture r = c0.capture(q);
  PromptMarks marks;
  marks.answer = {5, 9};
  marks.query = 30;
  CaptureOptions o;
  o.interventions = resolve_interventions(q.interventions, diff.config(), marks, 40);
  require_same_trace(*r.trace, diff.capture(ids, o));
  CHECK(r.trace->interventions == o.interventions.applied);
  // The request reads back as written; what the server's model cannot take is refused with the spec.
  const remote::CaptureRequest back = remote::parse_capture_request(remote::to_json(q), remote::Limits{});
  CHECK(back.interventions == q.interventions);
  CHECK(back.answer_begin == 5);
  CHECK(back.query == 30);
  remote::CaptureRequest bad = ids_request(ids);
  bad.interventions = {"lambda:0=0"};
  CHECK_THROWS_WITH(c1.capture(bad), Catch::Contains("'interventions'") && Catch::Contains("has no λ"));
  bad.interventions = {"ablate:0"};
  CHECK_THROWS_WITH(remote::parse_capture_request(remote::to_json(bad), remote::Limits{}),
                    Catch::Contains("'interventions'") && Catch::Contains("ablate needs a layer and a head"));
}
