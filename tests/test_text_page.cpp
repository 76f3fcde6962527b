// The Text view's page (app/reports/text_page): the weights it embeds are the trace's, bit for bit; its means
// are the Text view's; what does not fit is named; it loads nothing from the network; and in a real browser
// (Debian's chromium, headless) its switches, hover and click show the trace's numbers.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "app/reports/prediction_text.h"
#include "app/reports/text_page.h"
#include "core/formats/error.h"
#include "core/formats/tiles.h"
#include "core/formats/token_weights.h"
#include "core/model/model.h"
#include "helpers.h"
#include "viz/text_shade.h"
#include "viz/token_text.h"

using namespace difflens;
using Catch::Matchers::Contains;

namespace {

struct Pair {
  Trace diff, base;
};

const Pair& tiny_pair() {
  static const Pair p = [] {
    const std::vector<int64_t> ids = test::random_ids(40, 259, 17);
    Pair out;
    out.diff = Model::random(test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2), 3).capture(ids, {});
    out.base = Model::random(test::tiny_config(AttentionKind::Baseline, 32, 2, 2, 2), 4).capture(ids, {});
    out.diff.config.name = "diff-tiny";
    out.base.config.name = "base-tiny";
    return out;
  }();
  return p;
}

std::vector<float> lower(const Trace& t, int layer, int head) {
  const int64_t T = t.length();
  const AttentionTile tile = attention_tile(t, layer, head, 0, T, 0, T);
  std::vector<float> out;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) out.push_back(tile.a[static_cast<size_t>(i * T + j)]);
  return out;
}

// The lower triangle of token_weights' rows for every query: what the page's mean maps must hold.
std::vector<float> rows_of(const Trace& t, int layer, HeadPool pool) {
  std::vector<float> out;
  for (int64_t q = 0; q < t.length(); ++q) {
    const TokenWeights w = token_weights(t, layer, 0, pool, WeightDirection::FromQuery, q);
    out.insert(out.end(), w.w.begin(), w.w.begin() + q + 1);
  }
  return out;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::memcmp(&x, &y, sizeof x) == 0;
         });
}

std::string run_output(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int rc = ::pclose(p);
  if (status) *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  return out;
}

std::string chromium_path() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (std::filesystem::exists(p)) return p;
  return "";
}

}  // namespace

TEST_CASE("page: the embedded maps are the trace's bit for bit, its means the Text view's", "[page]") {
  const Pair& p = tiny_pair();
  app::PageOptions o;
  o.layers = {0, 1};
  o.layer = 1;
  o.head[0] = 1;
  o.head[1] = 0;
  o.query = 30;
  o.answer_begin = 5;
  o.answer_end = 8;
  app::PageReport rep;
  const std::string html = app::text_page_html({&p.diff, &p.base}, o, &rep);
  const auto data = nlohmann::json::parse(app::page_data_json(html));
  const int64_t T = p.diff.length();
  CHECK(data["format"] == "difflens-page 1");
  CHECK(data["tokens"].get<std::vector<std::string>>() ==
        viz::display_tokens(p.diff.tokens, viz::Spaces::Visible));
  CHECK(data["query"] == 30);
  CHECK(data["answer"] == nlohmann::json::array({5, 8}));
  CHECK(data["shade"]["pos"].size() == 256);
  REQUIRE(data["models"].size() == 2);
  int maps = 0;
  for (size_t m = 0; m < 2; ++m) {
    const Trace& t = m == 0 ? p.diff : p.base;
    const auto& jm = data["models"][m];
    CHECK(jm["name"] == t.config.name);
    CHECK(jm["diverging"] == t.config.is_diff());
    REQUIRE(jm["layers"].size() == 2);
    for (const auto& jl : jm["layers"]) {
      const int layer = jl["index"];
      CHECK(jl["maps"].size() == static_cast<size_t>(t.config.map_heads()));  // everything fits
      for (const auto& [head, b64] : jl["maps"].items()) {
        CHECK(same_floats(app::decode_page_map(b64, T), lower(t, layer, std::stoi(head))));
        ++maps;
      }
      CHECK(jl["mean_heads"] == t.config.map_heads());
      CHECK(same_floats(app::decode_page_map(jl["mean"], T), rows_of(t, layer, HeadPool::LayerMean)));
      ++maps;
    }
    CHECK(jm["all_heads"] == 2 * t.config.map_heads());
    CHECK(same_floats(app::decode_page_map(jm["all"], T), rows_of(t, 0, HeadPool::AllLayers)));
    ++maps;
  }
  CHECK(rep.maps == maps);
  CHECK(rep.left_out.empty());
  CHECK(rep.bytes == html.size());
  // Self-contained: nothing a browser would fetch.
  for (const char* remote : {"http:", "https:", "src=", "<link", "@import", "url(", "//cdn"})
    CHECK(html.find(remote) == std::string::npos);
  // A single trace makes a one-model page.
  const auto one = nlohmann::json::parse(app::page_data_json(app::text_page_html({&p.base}, o)));
  CHECK(one["models"].size() == 1);
  // Captured without every position's prediction: only the last token's next-token list, no hover text.
  CHECK_FALSE(data["models"][0].contains("here"));
  REQUIRE(data["models"][0]["next"].size() == static_cast<size_t>(T));
  for (int64_t i = 0; i + 1 < T; ++i) CHECK(data["models"][0]["next"][i] == "");
  CHECK(data["models"][0]["next"][T - 1].get<std::string>().rfind(
            "next after " + std::to_string(T - 1) + ":   ", 0) == 0);
}

TEST_CASE("page: each token's expected tokens and the top 5 after it are the trace's predictions", "[page]") {
  const Model m = Model::random(test::tiny_config(AttentionKind::Diff, 32, 2, 2, 2), 3);
  CaptureOptions c;
  c.position_top_k = 5;
  Trace t = m.capture(test::random_ids(12, 259, 5), c);
  t.config.name = "diff-tiny";
  const int64_t T = t.length();
  REQUIRE(t.predictions.has(3));
  const auto data = nlohmann::json::parse(app::page_data_json(app::text_page_html({&t}, app::PageOptions{})));
  const auto& jm = data["models"][0];
  REQUIRE(jm["next"].size() == static_cast<size_t>(T));
  REQUIRE(jm["here"].size() == static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i) {
    INFO("token " << i);
    // The line under the title: the five likeliest after token i, the trace's own ids and probabilities.
    std::string line = "next after " + std::to_string(i) + ":";
    for (int64_t j = 0; j < 5; ++j) {
      char part[64];
      std::snprintf(part, sizeof part, "   %.1f %% ", 100.0 * t.predictions.prob(i, j));
      line +=
          part + viz::display_token(t.predictions.pieces.at(t.predictions.id(i, j)), viz::Spaces::Visible);
    }
    CHECK(jm["next"][i] == line);
    CHECK(jm["here"][i] == app::expected_here(t, i));
  }
  CHECK(jm["here"][0] == "");  // nothing precedes the first token
  CHECK_THAT(jm["here"][4].get<std::string>(), Contains("expected here: '") && Contains(", rank "));
}

TEST_CASE("page: heads that do not fit are left out and named, a page that cannot hold its means is refused",
          "[page][errors]") {
  const Pair& p = tiny_pair();
  const int64_t T = p.diff.length();
  const size_t per_map = app::page_map_bytes(T);
  CHECK(per_map == (static_cast<size_t>(T * (T + 1) / 2) * 4 + 2) / 3 * 4);
  app::PageOptions o;
  o.layer = 1;
  o.head[0] = 1;
  o.head[1] = 2;
  // Required per model: the all-layer mean, layer 1's mean, the selected head: 6 maps; room for one more.
  o.max_bytes = 7 * per_map;
  app::PageReport rep;
  const std::string html = app::text_page_html({&p.diff, &p.base}, o, &rep);
  CHECK(rep.maps == 7);
  const auto data = nlohmann::json::parse(app::page_data_json(html));
  CHECK(data["models"][0]["layers"][0]["maps"].size() == 2);  // head 1 and the one that fitted: head 0
  CHECK(data["models"][0]["layers"][0]["maps"].contains("0"));
  const int base_heads = static_cast<int>(p.base.config.map_heads());
  REQUIRE(rep.left_out.size() == 1);
  std::string rest;
  for (int h = 0; h < base_heads; ++h)
    if (h != 2) rest += (rest.empty() ? "" : ", ") + std::to_string(h);
  CHECK(rep.left_out[0] == "base-tiny layer 1: heads " + rest);
  CHECK(html.find("Left out to keep the page small: base-tiny layer 1: heads " + rest) != std::string::npos);

  o.max_bytes = 5 * per_map;
  CHECK_THROWS_WITH(app::text_page_html({&p.diff, &p.base}, o),
                    Contains("a page of 40 tokens needs") && Contains("6 maps of") && Contains("--max-mb"));
  o.max_bytes = size_t{64} << 20;
  o.query = 40;
  CHECK_THROWS_WITH(app::text_page_html({&p.diff}, o), "query token 40 is outside the 40-token prompt");
  o.query = -1;
  o.answer_begin = 38;
  o.answer_end = 41;
  CHECK_THROWS_WITH(app::text_page_html({&p.diff}, o),
                    "the answer [38, 41) lies outside the 40-token prompt");
  o.answer_begin = o.answer_end = -1;
  o.layer = 2;
  CHECK_THROWS_WITH(app::text_page_html({&p.diff}, o), "diff-tiny: layer 2 is not in this trace");
  o.layer = 0;
  o.head[0] = 7;
  CHECK_THROWS_WITH(app::text_page_html({&p.diff}, o),
                    "diff-tiny: head 7 of layer 0 is not in this trace (kept: 0, 1)");
  o.head[0] = 0;
  Trace shorter = p.base;
  shorter.token_ids.pop_back();
  CHECK_THROWS_WITH(app::text_page_html({&p.diff, &shorter}, o),
                    Contains("the two traces hold different tokens"));
  CHECK_THROWS_WITH(app::page_data_json("<html></html>"), "not a DiffLens page: no embedded data");
  CHECK_THROWS_WITH(app::decode_page_map("AAAA", 40), Contains("not the 3280 of 40 tokens"));
}

TEST_CASE("page: in chromium, hover, leave, click and the switches show the trace's weights",
          "[page][browser]") {
  const std::string chromium = chromium_path();
  if (chromium.empty()) {
    // CI installs it (scripts/install-deps): there a missing browser is a failure, not a reason to skip.
    if (std::getenv("CI")) FAIL("chromium is not installed, though scripts/install-deps installs it");
    test::skip("chromium is not installed (scripts/install-deps installs it)");
  }
  const Model diff = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/diff-small", DeviceChoice::Cpu);
  const Model base = Model::load(DIFFLENS_SOURCE_DIR "/assets/models/baseline-small", DeviceChoice::Cpu);
  const std::string text =
      "The secret code of Thomas is 7182. The river was high that spring, and the mill stood still. "
      "Q: What is the secret code of Thomas?\nA: The secret code of Thomas is";
  CaptureOptions with_predictions;  // as the app captures: each token's top 5 (the page's hover and line)
  with_predictions.position_top_k = 5;
  const Trace td = diff.capture(diff.tokenizer().encode(text, true).ids, with_predictions);
  const Trace tb = base.capture(base.tokenizer().encode(text, true).ids, with_predictions);
  const std::vector<std::string> labels = viz::display_tokens(td.tokens, viz::Spaces::Visible);
  int64_t answer = -1;  // the code's first digit
  for (size_t i = 0; i < labels.size() && answer < 0; ++i)
    if (labels[i] == "7" || labels[i] == " 7") answer = static_cast<int64_t>(i);
  REQUIRE(answer > 0);
  app::PageOptions o;
  o.layer = 1;
  o.head[0] = 3;
  o.head[1] = 4;
  o.answer_begin = answer;
  o.answer_end = answer + 4;
  test::ScratchDir dir("page");
  const std::filesystem::path page = dir / "page.html";
  {
    std::ofstream f(page);
    f << app::text_page_html({&td, &tb}, o);
  }
  const std::string url = "file://" + page.string() + "#selftest";
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--user-data-dir=" +
      (dir / "profile").string() + " --virtual-time-budget=5000 ";
  int status = -1;
  const std::string dom =
      run_output("timeout 120 " + chromium + flags + "--dump-dom '" + url + "' 2>/dev/null", &status);
  INFO(dom.substr(0, 2000));
  REQUIRE(status == 0);
  const std::string open = "<pre id=\"selftest-result\">";
  const size_t a = dom.find(open), b = dom.find("</pre>", a);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  const auto result = nlohmann::json::parse(dom.substr(a + open.size(), b - a - open.size()));
  INFO(result.dump());
  CHECK(result["ok"] == true);
  CHECK(result["failures"].empty());
  REQUIRE(result["cases"].size() == 4);
  for (const auto& c : result["cases"]) {
    const HeadPool pool = c["pool"] == "head"    ? HeadPool::Head
                          : c["pool"] == "layer" ? HeadPool::LayerMean
                                                 : HeadPool::AllLayers;
    const WeightDirection d = c["dir"] == "from" ? WeightDirection::FromQuery : WeightDirection::ToToken;
    const viz::ValueScale scale = c["scale"] == "linear" ? viz::ValueScale::Linear
                                  : c["scale"] == "sqrt" ? viz::ValueScale::Sqrt
                                                         : viz::ValueScale::Log;
    CHECK(c["query"] == answer);  // the hovered token became the query
    for (size_t m = 0; m < 2; ++m) {
      const Trace& t = m == 0 ? td : tb;
      // Shown under the title: the model's top 5 after the hovered query; on the token: what it expected.
      std::string next = "next after " + std::to_string(answer) + ":";
      for (const app::Candidate& k : app::candidates_after(t, answer, 5))
        next += "   " + app::candidate_text(k);
      CHECK(c["next"][m] == next);
      CHECK_THAT(c["titles"][m].get<std::string>(), Contains("\n" + app::expected_here(t, answer)));
      const TokenWeights w = token_weights(t, 1, c["heads"][m], pool, d, answer);
      const auto& shown = c["weights"][m];
      REQUIRE(shown.size() == w.w.size());
      // The shade the page gave each token is the one the app gives it (viz::text_shade_index); the log
      // scale's log10 may round one step apart in the browser's maths library.
      viz::ValueRange range{0, t.config.is_diff()};
      for (int64_t i = w.first; i < w.end; ++i)
        range.hi = std::max(range.hi, static_cast<double>(std::fabs(w.w[static_cast<size_t>(i)])));
      if (range.hi <= 0) range.hi = 1;
      const auto& steps = c["steps"][m];
      REQUIRE(steps.size() == w.w.size());
      for (int64_t i = w.first; i < w.end; ++i) {
        const int want = viz::text_shade_index(w.w[static_cast<size_t>(i)], range, scale);
        INFO(c["scale"] << " token " << i << " weight " << w.w[static_cast<size_t>(i)]);
        if (scale == viz::ValueScale::Log)
          CHECK(std::abs(steps[static_cast<size_t>(i)].get<int>() - want) <= 1);
        else
          CHECK(steps[static_cast<size_t>(i)].get<int>() == want);
      }
      for (size_t i = 0; i < w.w.size(); ++i) {
        const bool carries = static_cast<int64_t>(i) >= w.first && static_cast<int64_t>(i) < w.end;
        if (!carries) {
          CHECK(shown[i].is_null());
          continue;
        }
        REQUIRE(shown[i].is_number());
        CHECK(static_cast<float>(shown[i].get<double>()) == w.w[i]);  // exact: the float the trace holds
      }
    }
  }
  CHECK(result["after_leave"] == td.length() - 1);  // leaving the text: the kept query (the last token)
  CHECK(result["after_click"] == answer);
  CHECK(result["final_hover"] == td.length() - 2);  // the screenshot's hover: the token before the last
  // A screenshot after the scripted hover (looked at by hand; here: written and not blank).
  const std::filesystem::path shot = dir / "page.png";
  run_output("timeout 120 " + chromium + flags + "--window-size=1280,800 --screenshot=" + shot.string() +
                 " '" + url + "' 2>/dev/null",
             &status);
  REQUIRE(status == 0);
  REQUIRE(std::filesystem::exists(shot));
  CHECK(std::filesystem::file_size(shot) > 20000);
  if (const char* keep = std::getenv("DIFFLENS_KEEP_SHOTS"))
    std::filesystem::copy_file(shot, std::filesystem::path(keep) / "page-chromium.png",
                               std::filesystem::copy_options::overwrite_existing);
}

TEST_CASE("page: model names and tokens cannot end its script or inject markup", "[page][errors]") {
  Pair p = tiny_pair();
  p.diff.config.name = "<!--<script>";
  p.base.config.name = "</script><b>&amp;";
  p.diff.tokens[3] = "</script><script>alert(1)</script>";
  p.diff.tokens[4] = "\xff\xfe broken \xc3";  // not UTF-8
  app::PageOptions o;
  o.layer = 1;
  const std::string html = app::text_page_html({&p.diff, &p.base}, o);
  // The data block holds no raw <, > or & at all, so nothing inside it can end or open an element.
  const std::string json = app::page_data_json(html);
  CHECK(json.find('<') == std::string::npos);
  CHECK(json.find('>') == std::string::npos);
  CHECK(json.find('&') == std::string::npos);
  // The page has exactly its own two scripts, and its data reads back with the names and tokens as given.
  size_t scripts = 0;
  for (size_t at = html.find("<script"); at != std::string::npos; at = html.find("<script", at + 1))
    ++scripts;
  CHECK(scripts == 2);
  const auto data = nlohmann::json::parse(json);
  CHECK(data["models"][0]["name"] == "<!--<script>");
  CHECK(data["models"][1]["name"] == "</script><b>&amp;");
  CHECK(data["tokens"][3] == "</script><script>alert(1)</script>");
  CHECK(data["tokens"][4].get<std::string>().find("broken") != std::string::npos);  // invalid bytes replaced
  CHECK(
      html.find(
          "<title>DiffLens: &lt;!--&lt;script&gt; and &lt;/script&gt;&lt;b&gt;&amp;amp;, 40 tokens</title>") !=
      std::string::npos);
  // In a browser the page still runs (its self-test passes with these names).
  const std::string chromium = chromium_path();
  if (chromium.empty()) return;  // the browser test above says why
  test::ScratchDir dir("page-hostile");
  {
    std::ofstream f(dir / "p.html");
    f << html;
  }
  int status = -1;
  const std::string dom =
      run_output("timeout 120 " + chromium +
                     " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
                     "--no-first-run --user-data-dir=" +
                     (dir / "profile").string() + " --virtual-time-budget=5000 --dump-dom 'file://" +
                     (dir / "p.html").string() + "#selftest' 2>/dev/null",
                 &status);
  REQUIRE(status == 0);
  CHECK(dom.find("<pre id=\"selftest-result\">{\"ok\":true") != std::string::npos);
}

TEST_CASE(
    "page: its script and style are app/reports/page's files verbatim, and the script passes node's parser",
    "[page]") {
  const std::string js = test::read_all(DIFFLENS_SOURCE_DIR "/app/reports/page/page.js");
  const std::string css = test::read_all(DIFFLENS_SOURCE_DIR "/app/reports/page/page.css");
  REQUIRE(js.size() > 1000);
  REQUIRE(css.size() > 200);
  const Pair& p = tiny_pair();
  app::PageOptions o;
  const std::string html = app::text_page_html({&p.diff, &p.base}, o);
  CHECK(html.find("<script>" + js + "</script>") != std::string::npos);
  CHECK(html.find("<style>" + css + "</style>") != std::string::npos);
  // node's own parser, as a JavaScript tool reads the file (scripts/install-deps installs node).
  if (std::system("command -v node > /dev/null 2>&1") != 0) {
    if (std::getenv("CI")) FAIL("node is not installed, though scripts/install-deps installs it");
    test::skip("node is not installed (scripts/install-deps installs nodejs)");
  }
  int status = -1;
  const std::string out =
      run_output("node --check " DIFFLENS_SOURCE_DIR "/app/reports/page/page.js 2>&1", &status);
  INFO(out);
  CHECK(status == 0);
  // ...and a file with a syntax error is refused by the same check (the check can fail).
  test::ScratchDir dir("page-js");
  test::write_all(dir / "broken.js", js.substr(0, js.size() / 2));
  run_output("node --check " + (dir / "broken.js").string() + " 2>&1", &status);
  CHECK(status != 0);
}
