// The Python package (python/difflens, numpy only) against the C++: bundles of every kind written here are
// read there and every array it reads is compared bit for bit with the trace's; malformed files are refused
// by name; batch and lens outputs read into columns; the serve client's captures equal local ones; `pip
// install ./python` installs a package that imports from anywhere. Skipped, saying why, without python3 and
// numpy.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "app/remote/server.h"
#include "core/formats/intervention.h"
#include "core/formats/trace_io.h"
#include "core/model/model.h"
#include "helpers.h"

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace difflens;

namespace {

const fs::path kPython = fs::path(DIFFLENS_SOURCE_DIR) / "python";

struct Run {
  int status;
  std::string out;
};

// A shell command in `dir`, its output (stdout and stderr) kept.
Run sh(const std::string& command, const test::ScratchDir& dir) {
  const std::string log = (dir / "sh.log").string();
  const int raw =
      std::system(("cd '" + dir.path().string() + "' && " + command + " > '" + log + "' 2>&1").c_str());
  return {WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, test::read_all(log)};
}

void need_python() {
  if (std::system("python3 -c 'import numpy' > /dev/null 2>&1") != 0)
    test::skip("no python3 with numpy here (scripts/install-deps installs python3-numpy)");
}

// python/tests/dump_bundle.py's reading of `what` (a folder or a .safetensors reply) into `out`.
Run dump(const std::string& what, const fs::path& out, const test::ScratchDir& dir) {
  return sh("python3 '" + (kPython / "tests" / "dump_bundle.py").string() + "' '" + what + "' '" +
                out.string() + "'",
            dir);
}

// Every array the C++ trace holds, by the name the bundle gives it.
std::vector<std::pair<std::string, const FloatArray*>> named_arrays(const Trace& t) {
  std::vector<std::pair<std::string, const FloatArray*>> out = {
      {"predictions.ids", &t.predictions.ids},
      {"predictions.probs", &t.predictions.probs},
      {"predictions.actual", &t.predictions.actual}};
  for (const auto& l : t.layers) {
    const std::string p = "layers." + std::to_string(l.index) + ".";
    for (const auto& [n, a] :
         std::vector<std::pair<const char*, const FloatArray*>>{{"A", &l.a},
                                                                {"A1", &l.a1},
                                                                {"A2", &l.a2},
                                                                {"logits1", &l.logits1},
                                                                {"logits2", &l.logits2},
                                                                {"hidden", &l.hidden},
                                                                {"A.mean", &l.a_mean},
                                                                {"A.max", &l.a_max},
                                                                {"A1.mean", &l.a1_mean},
                                                                {"A1.max", &l.a1_max},
                                                                {"A2.mean", &l.a2_mean},
                                                                {"A2.max", &l.a2_max},
                                                                {"q1", &l.q1},
                                                                {"k1", &l.k1},
                                                                {"q2", &l.q2},
                                                                {"k2", &l.k2},
                                                                {"lse1", &l.lse1},
                                                                {"lse2", &l.lse2},
                                                                {"v", &l.v},
                                                                {"subln_weight", &l.subln_weight},
                                                                {"lambda", &l.lambda_rows},
                                                                {"lambda_logits", &l.lambda_logits}})
      out.emplace_back(p + n, a);
  }
  return out;
}

// What Python read (summary.json and the raw arrays in `out`) equals the trace, bit for bit.
void check_same(const Trace& t, const fs::path& out) {
  const json s = json::parse(test::read_all(out / "summary.json"));
  CHECK(s["length"] == t.length());
  CHECK(s["tokens"].get<std::vector<std::string>>() == t.tokens);
  CHECK(s["token_ids"].get<std::vector<int64_t>>() == t.token_ids);
  CHECK(s["kind"] == to_string(t.config.attention));
  REQUIRE(s["layers"].size() == t.layers.size());
  for (size_t i = 0; i < t.layers.size(); ++i) {
    const auto& l = t.layers[i];
    const json& sl = s["layers"][i];
    CHECK(sl["index"] == l.index);
    CHECK(sl["heads"].get<std::vector<int>>() == l.heads);
    CHECK(sl["pooled"] == l.pooled);
    if (t.config.is_diff())
      CHECK(sl["lambda"].get<double>() == static_cast<double>(l.lambda));
    else
      CHECK(sl["lambda"].is_null());
    CHECK(sl["logit_top1"].get<double>() == static_cast<double>(l.logit_stats.top_k(1)));
  }
  CHECK(s["interventions"].size() == t.interventions.size());
  for (size_t i = 0; i < t.interventions.size(); ++i) {
    CHECK(s["interventions"][i]["spec"] == t.interventions[i].first);
    CHECK(s["interventions"][i]["as_run"] == t.interventions[i].second);
  }
  REQUIRE(s["next_token"].size() == t.next_token.size());
  CHECK(s["next_token"][0]["id"] == t.next_token[0].id);
  size_t kept = 0;
  for (const auto& [name, a] : named_arrays(t)) {
    if (a->empty()) {
      CHECK(!s["shapes"].contains(name));
      continue;
    }
    ++kept;
    INFO(name);
    REQUIRE(s["shapes"].contains(name));
    CHECK(s["shapes"][name].get<std::vector<int64_t>>() == a->shape);
    const std::string bytes = test::read_all(out / (name + ".f32"));
    REQUIRE(bytes.size() == a->data.size() * sizeof(float));
    CHECK(std::memcmp(bytes.data(), a->data.data(), bytes.size()) == 0);
  }
  CHECK(s["shapes"].size() == kept);  // nothing read that the trace does not hold
}

Interventions specs(const Model& m, const std::vector<std::string>& s, int64_t T) {
  PromptMarks marks;
  marks.answer = {2, 4};
  marks.query = T - 1;
  return resolve_interventions(s, m.config(), marks, T);
}

}  // namespace

TEST_CASE("python: the reader gives every array of every kind of bundle as the C++ wrote it, bit for bit",
          "[python][bundle]") {
  need_python();
  test::ScratchDir dir("python-bundles");
  const std::vector<int64_t> ids = test::random_ids(24, 259, 7);
  std::vector<std::pair<std::string, Trace>> traces;
  {
    const Model diff = Model::random(test::tiny_config(AttentionKind::Diff, 32, 2), 3);
    CaptureOptions o;
    o.keep_qkv = o.keep_logits = o.keep_hidden = true;
    o.position_top_k = 3;
    traces.emplace_back("diff-everything", diff.capture(ids, o));
    CaptureOptions iv;
    iv.interventions = specs(diff, {"lambda:0=0", "ablate:1:1", "knockout:1=not-answer"}, 24);
    traces.emplace_back("diff-intervened", diff.capture(ids, iv));
    CaptureOptions pooled;
    pooled.pooled_budget_bytes = 4096;  // 6 kept maps a layer x mean and max: pooled grids, q, k and lse kept
    traces.emplace_back("diff-pooled", diff.capture(test::random_ids(80, 259, 8), pooled));
  }
  {
    const Model v2 = Model::random(test::v2_config(), 4);
    CaptureOptions o;
    o.keep_qkv = true;
    traces.emplace_back("v2", v2.capture(ids, o));
    CaptureOptions iv;
    iv.interventions = specs(v2, {"lambda:1:2=0.25"}, 24);
    traces.emplace_back("v2-intervened", v2.capture(ids, iv));
  }
  {
    const Model base = Model::random(test::tiny_config(AttentionKind::Baseline, 32, 2), 5);
    CaptureOptions some;
    some.layers = {1};
    some.heads = {0};
    traces.emplace_back("baseline-some", base.capture(ids, some));
    CaptureOptions none;
    none.keep_maps = false;
    traces.emplace_back("baseline-no-maps", base.capture(ids, none));
  }
  for (const auto& [name, t] : traces) {
    INFO(name);
    write_trace_bundle(t, dir / name);
    const Run r = dump(name, dir / (name + "-py"), dir);
    INFO(r.out);
    REQUIRE(r.status == 0);
    check_same(t, dir / (name + "-py"));
  }
  // A serve reply: one safetensors file, trace.json in its metadata.
  test::write_all(dir / "reply.safetensors", trace_to_bytes(traces[1].second));
  const Run r = dump("reply.safetensors", dir / "reply-py", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  check_same(traces[1].second, dir / "reply-py");
  // The notebook's view names the model, its kind, lambda per layer and the interventions.
  const json s = json::parse(test::read_all(dir / "reply-py" / "summary.json"));
  CHECK_THAT(s["repr"].get<std::string>(), Catch::Contains("(diff), 24 tokens, 2 layers") &&
                                               Catch::Contains("lambda per layer: 0.000") &&
                                               Catch::Contains("interventions: lambda:0=0; ablate:1:1"));
}

TEST_CASE("python: malformed bundles are refused with the file and what is wrong", "[python][hostile]") {
  need_python();
  test::ScratchDir dir("python-hostile");
  const Model diff = Model::random(test::tiny_config(AttentionKind::Diff, 32, 2), 3);
  const Trace t = diff.capture(test::random_ids(10, 259, 2));
  write_trace_bundle(t, dir / "good");
  const std::string maps = test::read_all(dir / "good" / "maps.safetensors");
  const std::string trace = test::read_all(dir / "good" / "trace.json");
  auto bundle = [&](const std::string& name, const std::string& m, const std::string& tj) {
    fs::create_directories(dir / name);
    test::write_all(dir / name / "maps.safetensors", m);
    test::write_all(dir / name / "trace.json", tj);
    return dump(name, dir / (name + "-py"), dir);
  };
  auto refused = [](const Run& r, const std::string& what) {
    INFO(r.out);
    CHECK(r.status == 2);
    CHECK_THAT(r.out, Catch::Contains("FormatError") && Catch::Contains(what));
  };
  refused(bundle("cut", maps.substr(0, maps.size() - 7), trace), "outside the");
  std::string huge = maps;
  huge[5] = '\x7f';  // a header length of petabytes
  refused(bundle("huge", huge, trace), "the header claims");
  refused(bundle("short", maps.substr(0, 5), trace), "too short for a safetensors header");
  refused(bundle("json", maps, trace.substr(0, trace.size() / 2)), "not valid JSON");
  json wrong = json::parse(trace);
  wrong["layers"][0]["heads"] = {0};  // the maps hold two heads
  refused(bundle("heads", maps, wrong.dump()), "trace.json implies");
  wrong = json::parse(trace);
  wrong["layers"][1].erase("index");
  refused(bundle("index", maps, wrong.dump()), "no whole-number index");
  wrong = json::parse(trace);
  wrong["format"] = "something-else";
  refused(bundle("format", maps, wrong.dump()), "not a DiffLens trace");
  refused(dump("nowhere", dir / "nowhere-py", dir), "cannot open");
  test::write_all(dir / "plain.safetensors", maps);  // a safetensors file without trace.json
  refused(dump("plain.safetensors", dir / "plain-py", dir), "no trace.json in its metadata");
}

TEST_CASE("python: batch and lens outputs read into columns, shares' old a2_part under its new name",
          "[python][batch][lens]") {
  need_python();
  test::ScratchDir dir("python-reports");
  const std::string models = std::string(" --models ") + DIFFLENS_SOURCE_DIR + "/assets/models/diff-small," +
                             DIFFLENS_SOURCE_DIR + "/assets/models/baseline-small --threads 2";
  test::write_all(
      dir / "items.jsonl",
      "{\"id\": \"mira\", \"prompt\": \"The secret code of Mira is 4821. Q: What is the secret code "
      "of Mira?\\nA: The secret code of Mira is\", \"answer\": \" 4821\"}\n"
      "{\"id\": \"tom\", \"prompt\": \"Tom's code is 7182. Q: What is Tom's code?\\nA: Tom's code "
      "is\", \"answer\": \" 7182\", \"tag\": \"short\"}\n");
  const test::CliRun batch = test::run_cli(
      "batch --items " + (dir / "items.jsonl").string() + " --out " + (dir / "batch").string() + models, dir);
  INFO(batch.out);
  REQUIRE(batch.status == 0);
  const test::CliRun lens = test::run_cli(
      "lens --prompt 'The secret code of Mira is 4821. The secret code of Mira is' --out " +
          (dir / "lens.csv").string() + " --attribution " + (dir / "shares.csv").string() + models,
      dir);
  INFO(lens.out);
  REQUIRE(lens.status == 0);
  // An older shares file, before the column was renamed.
  std::string old = test::read_all(dir / "shares.csv");
  old.replace(old.find("minus_lambda_a2_part"), std::strlen("minus_lambda_a2_part"), "a2_part");
  test::write_all(dir / "old-shares.csv", old);
  test::write_all(
      dir / "read.py",
      "import json, sys\nsys.path.insert(0, '" + kPython.string() +
          "')\nimport difflens, numpy as np\n"
          "b = difflens.read_batch('batch')\n"
          "l = difflens.read_lens('lens.csv')\n"
          "s = difflens.read_shares('shares.csv')\n"
          "o = difflens.read_shares('old-shares.csv')\n"
          "d = s.where(model='diff-small', part='head')\n"
          "print(json.dumps({'items': len(b.items), 'heads': len(b.heads), 'models': "
          "sorted(set(b.items['model'])), 'p_answer': [float(x) for x in b.items['p_answer']], "
          "'accuracy': b.json['summary']['diff-small']['accuracy']['estimate'], 'lens': len(l), "
          "'lens_layers': int(np.nanmax(l['layer'])), 'logit': float(s.where(model='diff-small', part='logit')['share'][0]), "
          "'share_sum': float(np.nansum(s.where(model='diff-small')['share'][s.where(model='diff-small')['part'] != 'logit'])), 'parts': float(np.nansum(d['a1_part'] + d['minus_lambda_a2_part'] - d['share'])), "
          "'old_same': bool(np.array_equal(o['minus_lambda_a2_part'], s['minus_lambda_a2_part'], "
          "equal_nan=True)), 'repr': repr(b)}))\n");
  const Run r = sh("python3 read.py", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const json j = json::parse(r.out);
  CHECK(j["items"] == 4);              // 2 items x 2 models
  CHECK(j["heads"] == 2 * (16 + 32));  // the bundled DIFF's 4 x 4 heads, the baseline's 4 x 8
  CHECK(j["models"] == json::array({"baseline-small", "diff-small"}));
  // The same numbers as items.csv's text (the C++'s own CSV, read line by line here).
  const std::vector<std::string> lines = test::lines_of(test::read_all(dir / "batch" / "items.csv"));
  REQUIRE(lines.size() == 5);
  CHECK(lines[0].find("p_answer") != std::string::npos);
  const json summary = json::parse(test::read_all(dir / "batch" / "summary.json"));
  CHECK(j["accuracy"] == summary["diff-small"]["accuracy"]["estimate"]);
  for (double p : j["p_answer"].get<std::vector<double>>()) CHECK((p >= 0 && p <= 1));
  CHECK(j["lens_layers"] == 3);
  CHECK(j["share_sum"].get<double>() == Approx(j["logit"].get<double>()).margin(1e-4));  // the shares add up
  CHECK(j["parts"].get<double>() ==
        Approx(0).margin(1e-4));  // A1 part + (-lambda A2 part) = the head's share
  CHECK(j["old_same"] == true);
  CHECK_THAT(j["repr"].get<std::string>(), Catch::Contains("items.csv (4 rows)"));
}

TEST_CASE("python: the serve client's captures equal local ones, refusals carry the server's message",
          "[python][remote]") {
  need_python();
  test::ScratchDir dir("python-serve");
  const std::string token = "0123456789abcdef0123";
  app::ServeOptions o;
  o.port = 0;
  o.token = token;
  o.log = false;
  const Model local = Model::random(test::tiny_config(AttentionKind::Diff, 32, 2), 5);
  std::vector<Model> models;
  models.push_back(Model::random(test::tiny_config(AttentionKind::Diff, 32, 2), 5));
  app::RemoteServer server(std::move(models), {"diff"}, o);
  const int port = server.start();
  const std::string url = "http://127.0.0.1:" + std::to_string(port);
  test::write_all(
      dir / "client.py",
      "import json, sys\nsys.path.insert(0, '" + kPython.string() + "')\nsys.path.insert(0, '" +
          (kPython / "tests").string() +
          "')\nimport difflens, dump_bundle\n"
          "c = difflens.Client('" +
          url + "', '" + token +
          "', name='py')\n"
          "info = c.info()\n"
          "b = c.capture(token_ids=[1, 50, 60, 70, 80, 90], keep_qkv=True)\n"
          "try:\n    c.capture(token_ids=[1, 999])\nexcept difflens.ServerError as e:\n"
          "    refused = [e.status, e.message]\n"
          "try:\n    difflens.Client('" +
          url +
          "', 'not-the-token-0123').info()\n"
          "except difflens.ServerError as e:\n    unauthorized = e.status\n"
          "t = c.tokenize('abc', bos=False)\n"
          "print(json.dumps({'models': len(info['models']), 'length': len(b), 'refused': refused, "
          "'unauthorized': unauthorized, 'ids': t['ids']}))\n");
  const Run r = sh("python3 client.py", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const json j = json::parse(r.out.substr(r.out.find('{')));
  CHECK(j["models"] == 1);
  CHECK(j["length"] == 6);
  CHECK(j["refused"][0] == 400);
  CHECK_THAT(j["refused"][1].get<std::string>(), Catch::Contains("999"));
  CHECK(j["unauthorized"] == 401);
  CHECK(j["ids"].size() == 3);  // a byte-level tokenizer: three bytes, no BOS
  // The reply's arrays, dumped by the same reader, equal a local capture of the same model.
  test::write_all(dir / "serve-dump.py",
                  "import sys\nsys.path.insert(0, '" + kPython.string() + "')\nsys.path.insert(0, '" +
                      (kPython / "tests").string() +
                      "')\nimport difflens, dump_bundle\n"
                      "c = difflens.Client('" +
                      url + "', '" + token +
                      "')\n"
                      "b = c.capture(token_ids=[1, 50, 60, 70, 80, 90], keep_qkv=True)\n"
                      "dump_bundle.dump(b, 'served-py')\n");
  const Run d = sh("python3 serve-dump.py", dir);
  INFO(d.out);
  REQUIRE(d.status == 0);
  CaptureOptions keep;
  keep.keep_qkv = true;
  Trace want = local.capture({1, 50, 60, 70, 80, 90}, keep);
  want.model_path = "diff";
  check_same(want, dir / "served-py");
  server.stop();
}

TEST_CASE("python: pip install ./python gives a package that imports from anywhere", "[python][install]") {
  need_python();
  test::ScratchDir dir("python-pip");
  if (std::system("python3 -c 'import venv, ensurepip' > /dev/null 2>&1") != 0)
    test::skip("python3 has no venv/ensurepip here (scripts/install-deps installs python3-venv)");
  // A virtual environment that sees Debian's numpy and setuptools; nothing is fetched (--no-index). From a
  // copy: building in place would leave build/ and *.egg-info in the source tree.
  fs::copy(kPython, dir / "python", fs::copy_options::recursive);
  Run r =
      sh("python3 -m venv --system-site-packages env && env/bin/pip install --no-index --no-build-isolation "
         "--quiet ./python",
         dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const Model diff = Model::random(test::tiny_config(AttentionKind::Diff, 32, 2), 3);
  write_trace_bundle(diff.capture(test::random_ids(9, 259, 1)), dir / "b");
  r = sh("cd / && '" + (dir / "env" / "bin" / "python").string() +
             "' -c 'import difflens, os; b = difflens.read_bundle(\"" + (dir / "b").string() +
             "\"); print(len(b), b.layers[1][\"A\"].shape, os.path.dirname(difflens.__file__))'",
         dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("9 (2, 9, 9)") && Catch::Contains((dir / "env").string()));
}

TEST_CASE("python: README's example reads a bundle and plots A1 - lambda A2 with matplotlib, as printed",
          "[python][docs]") {
  need_python();
  if (std::system("python3 -c 'import matplotlib' > /dev/null 2>&1") != 0)
    test::skip("no matplotlib here (scripts/install-deps installs python3-matplotlib)");
  test::ScratchDir dir("python-readme");
  const std::string readme = test::read_all(fs::path(DIFFLENS_SOURCE_DIR) / "README.md");
  const size_t begin = readme.find("```python\n");
  REQUIRE(begin != std::string::npos);
  const size_t end = readme.find("```", begin + 10);
  const std::string code = readme.substr(begin + 10, end - begin - 10);
  CHECK(test::lines_of(code).size() == 5);
  // The bundle the page makes first, with the command it prints.
  const size_t at = readme.find("`difflens capture", readme.rfind("## From Python", begin));
  REQUIRE(at < begin);
  std::string command = readme.substr(at + 10, readme.find('`', at + 1) - at - 10);
  command.replace(command.find("assets/"), 7, std::string(DIFFLENS_SOURCE_DIR) + "/assets/");
  command.replace(command.find("--out trace/"), 12, "--out " + (dir / "trace").string());
  const test::CliRun made = test::run_cli(command, dir);
  INFO(made.out);
  REQUIRE(made.status == 0);
  test::write_all(dir / "example.py", code);
  const Run r = sh("PYTHONPATH='" + kPython.string() + "' MPLBACKEND=Agg python3 example.py", dir);
  INFO(r.out);
  REQUIRE(r.status == 0);
  const std::string png = test::read_all(dir / "head0.png");
  REQUIRE(png.size() > 1000);
  CHECK(png.compare(1, 3, "PNG") == 0);
}

TEST_CASE("python: FORMATS.md's serve example runs as printed against a live server",
          "[python][remote][docs]") {
  need_python();
  if (std::system("command -v curl > /dev/null 2>&1") != 0)
    test::skip("no curl here (scripts/install-deps installs it)");
  test::ScratchDir dir("python-formats");
  const std::string formats = test::read_all(fs::path(DIFFLENS_SOURCE_DIR) / "core" / "FORMATS.md");
  const size_t section = formats.find("## 3. Remote protocol");
  const size_t begin = formats.find("    TOKEN=...", section);
  REQUIRE(begin != std::string::npos);
  const std::string block = formats.substr(begin, formats.find("\n\n", begin) - begin);
  // The page's lines, continuations joined, its placeholders filled: the token, this server's port, python/.
  std::string script = "set -e\n", line;
  for (const std::string& raw : test::lines_of(block)) {
    std::string l = raw.substr(std::min<size_t>(4, raw.size()));
    if (l.rfind("TOKEN=", 0) == 0) continue;  // the token this server prints: set below
    line += l;
    if (!line.empty() && line.back() == '\\') {
      line.pop_back();
      continue;
    }
    script += line + "\n";
    line.clear();
  }
  CHECK(test::lines_of(script).size() == 4);  // set -e, info, capture, python
  app::ServeOptions o;
  o.port = 0;
  o.token = "formats-0123456789abcdef";
  o.log = false;
  std::vector<Model> models;
  models.push_back(Model::load(std::string(DIFFLENS_SOURCE_DIR) + "/assets/models/diff-small"));
  app::RemoteServer server(std::move(models), {"diff-small"}, o);
  const int port = server.start();
  for (size_t at; (at = script.find("127.0.0.1:8765")) != std::string::npos;)
    script.replace(at, 14, "127.0.0.1:" + std::to_string(port));
  for (size_t at; (at = script.find("PYTHONPATH=python ")) != std::string::npos;)
    script.replace(at, 18, "PYTHONPATH='" + kPython.string() + "' ");
  test::write_all(dir / "example.sh", script);
  const Run r = sh("TOKEN=" + o.token + " bash example.sh", dir);
  INFO(script);
  INFO(r.out);
  REQUIRE(r.status == 0);
  CHECK_THAT(r.out, Catch::Contains("\"protocol\": 1") &&
                        Catch::Contains("<DiffLens bundle: diff-small (diff), 15 tokens, 4 layers"));
  server.stop();
}
