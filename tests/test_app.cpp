// Plain app logic that needs no window: the model view's layer/head filters, UI glyphs, the views and
// their settings, the map grid, chart ticks and Figure 1's shares.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "app/desktop/glyphs.h"
#include "app/desktop/layout.h"
#include "app/desktop/tile_service.h"
#include "app/desktop/typing.h"
#include "app/reports/head_figures.h"
#include "app/reports/model_card.h"
#include "core/formats/metrics.h"
#include "helpers.h"

using difflens::app::parse_index_filter;

TEST_CASE("model view filters: ranges and lists, clipped to what exists", "[app][viz]") {
  CHECK(parse_index_filter("", 4) == std::vector<int>{0, 1, 2, 3});
  CHECK(parse_index_filter(" , ", 3) == std::vector<int>{0, 1, 2});
  CHECK(parse_index_filter("0-2,7", 10) == std::vector<int>{0, 1, 2, 7});
  CHECK(parse_index_filter("7, 0 - 1", 10) == std::vector<int>{0, 1, 7});  // sorted, spaces allowed
  CHECK(parse_index_filter("3-100", 6) == std::vector<int>{3, 4, 5});      // clipped to n
  CHECK(parse_index_filter("5-2", 6).empty());                             // an empty range
  CHECK(parse_index_filter("x,2,-1", 6) == std::vector<int>{2});           // junk and negatives ignored
  CHECK(parse_index_filter("1,1,1", 4) == std::vector<int>{1});
  CHECK(parse_index_filter("9", 4).empty());
}

TEST_CASE("UI glyphs: characters outside the base ranges are collected once, bad bytes skipped",
          "[app][viz]") {
  difflens::app::GlyphNeeds g;
  CHECK_FALSE(g.add("Hello, λ — A1 − λA2 ≤ 1"));  // all in the base ranges
  CHECK(g.codepoints().empty());
  CHECK(g.add("Привет 差分"));  // Cyrillic and CJK
  CHECK(g.codepoints() == std::set<uint32_t>{0x41F, 0x440, 0x438, 0x432, 0x435, 0x442, 0x5DEE, 0x5206});
  CHECK_FALSE(g.add("вет差"));  // nothing new
  // Emoji (beyond U+FFFF), invalid and truncated UTF-8, overlong forms and controls add nothing.
  CHECK_FALSE(g.add("\xF0\x9F\xA4\x97 \xFF\xFE \xE5\xB7 \xC0\xAF \x01\x7F"));
  CHECK_FALSE(g.add("\xE5\xB7\xAE"));  // 差 again
  CHECK(g.codepoints().size() == 8);
}

TEST_CASE("views: names, the old tab names, and a message that lists them", "[app][layout]") {
  using difflens::app::View;
  for (int i = 0; i < difflens::app::kViews; ++i) {
    const auto v = static_cast<View>(i);
    CHECK(difflens::app::parse_view(difflens::app::view_name(v)) == v);
  }
  CHECK(difflens::app::parse_view("overview") == View::QueryRow);  // the old --tab name
  CHECK(difflens::app::parse_view("models") == View::Models);
  CHECK_FALSE(difflens::app::parse_view("Maps").has_value());
  CHECK_FALSE(difflens::app::parse_view("").has_value());
  CHECK(difflens::app::view_names() ==
        "maps, query-row, models, lambda, noise, lab, outliers, explain, text or why");
}

TEST_CASE("layout settings: written and read back, bad or unknown lines change nothing", "[app][layout]") {
  using namespace difflens::app;
  LayoutState a;
  a.view = View::Lambda;
  a.split[static_cast<size_t>(View::QueryRow)] = false;
  a.split[static_cast<size_t>(View::Outliers)] = true;
  a.side_by_side = false;
  a.split_fraction = 0.35f;
  a.side_panel = false;
  a.side_width_em = 20;
  a.square_maps = true;
  a.shared_rows_scale = true;
  a.window_w = 1366;
  a.window_h = 705;
  const std::string text = layout_settings_text(a);
  CHECK(text.find("view=lambda\n") != std::string::npos);
  CHECK(text.find("split=outliers\n") != std::string::npos);
  LayoutState b;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) CHECK(read_layout_setting(b, line));
  CHECK(layout_settings_text(b) == text);
  CHECK(b.split == a.split);
  CHECK(b.window_w == 1366);
  CHECK(b.window_h == 705);
  // A file from elsewhere: each bad line is refused and leaves the setting as it was.
  LayoutState c = b;
  for (const char* bad :
       {"view=tables", "split=maps,tables", "split_fraction=0.99", "split_fraction=x", "side_panel=yes",
        "window=100x100", "window=1600x", "window=x1000", "colour=red", "view"})
    CHECK_FALSE(read_layout_setting(c, bad));
  CHECK(layout_settings_text(c) == text);
  CHECK(read_layout_setting(c, "split="));  // no view split with the maps
  CHECK(c.split == std::array<bool, kViews>{});
  CHECK_FALSE(c.split_shown());
}

TEST_CASE("map grid: four maps take the arrangement that makes each largest, and fill it", "[app][layout]") {
  using difflens::app::plan_map_grid;
  // The maps view at 1600x1000: 1304 x 766 px, legends 70 px, titles 22 px, gaps 14 px.
  auto g = plan_map_grid(4, 1304, 766, 70, 22, 14, false);
  CHECK(g.columns == 2);
  CHECK(g.rows == 2);
  CHECK(g.map_h == Approx((766 - 14) / 2.0 - 22));                            // 354: the height binds
  CHECK(g.map_w == Approx(std::min((1304 - 14) / 2.0 - 70, 1.6 * g.map_h)));  // 575, under 1.6 x its height
  CHECK(2 * (g.map_w + 70) + 14 >= 0.9 * 1304);                               // the grid spans the width
  // A wide, short strip: all four in one row, no taller than 1.4 x their width.
  g = plan_map_grid(4, 1304, 371, 70, 22, 14, false);
  CHECK(g.columns == 4);
  CHECK(g.map_w == Approx((1304 - 3 * 14) / 4.0 - 70));
  CHECK(g.map_h == Approx(std::min(371.0 - 22, 1.4 * g.map_w)));
  // A tall, narrow column: one map per row.
  g = plan_map_grid(4, 400, 2000, 70, 22, 14, false);
  CHECK(g.columns == 1);
  CHECK(g.rows == 4);
  // Square maps: the smaller side.
  g = plan_map_grid(4, 1304, 766, 70, 22, 14, true);
  CHECK(g.map_w == g.map_h);
  CHECK(g.map_w == Approx((766 - 14) / 2.0 - 22));
  // Three maps (a DIFF model alone) and one; sizes never below 16 px.
  g = plan_map_grid(3, 1304, 766, 70, 22, 14, false);
  CHECK(g.columns * g.rows >= 3);
  g = plan_map_grid(1, 20, 20, 70, 22, 14, false);
  CHECK(g.map_w == 16);
  CHECK(g.map_h == 16);
}

TEST_CASE("chart ticks: round steps that cover the range, zero included", "[app][layout]") {
  using difflens::app::nice_ticks;
  CHECK(nice_ticks(0, 1, 6) == std::vector<double>{0, 0.2, 0.4, 0.6, 0.8, 1.0});
  CHECK(nice_ticks(0, 0.09, 5) == std::vector<double>{0, 0.02, 0.04, 0.06, 0.08});
  const auto t = nice_ticks(-0.27, 1.0, 8);
  CHECK(std::find(t.begin(), t.end(), 0.0) != t.end());
  CHECK(t.size() <= 8);
  CHECK(t.front() >= -0.27 - 1e-12);
  CHECK(t.back() <= 1.0 + 1e-12);
  for (size_t i = 1; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == Approx(0.2));
  CHECK(nice_ticks(3, 3, 5) == std::vector<double>{3});  // a range of zero width
  CHECK(nice_ticks(0, 250, 6) == std::vector<double>{0, 50, 100, 150, 200, 250});
  // A short chart asks for two: both inside the range, not 0 alone at a step of 1 (Figure 1 in lecture mode).
  CHECK(nice_ticks(-0.12, 0.978, 2) == std::vector<double>{0, 0.5});
  CHECK(nice_ticks(0, 1.7, 2) == std::vector<double>{0, 1});
  CHECK(nice_ticks(-0.3, 0.04, 2) == std::vector<double>{-0.2, 0});
  // DIFF V2's row on the story's last slide, [-0.403, 0.307] with its headroom: no step of 1, 2 or 5 gives
  // two ticks inside (0.2 gives four, 0.5 only 0); a step of 0.4 does.
  CHECK(nice_ticks(-0.40329, 0.3067, 2) == std::vector<double>{-0.4, 0});
  CHECK(nice_ticks(-0.03, 0.06, 2) == std::vector<double>{0, 0.05});  // 1-2-5 gives two: kept
  CHECK(nice_ticks(-0.09, 0.12, 2) == std::vector<double>{0, 0.1});
  // Labels read as their ticks: two decimals unless they would round a tick away (0.005 is not "0.01").
  using difflens::app::tick_label_format;
  CHECK(tick_label_format({0, 0.5}, "%.2f") == "%.2f");
  CHECK(tick_label_format({0, 0.005}, "%.2f") == "%.3f");
  CHECK(tick_label_format({-0.0002, 0, 0.0002}, "%.2f") == "%.4f");
  CHECK(tick_label_format({0, 50, 100}, "%.0f") == "%.0f");
  CHECK(tick_label_format({0}, "%.2f") == "%.2f");
}

TEST_CASE("Figure 1's shares of one query row equal the attention-noise metric's", "[app][layout][metrics]") {
  // A 5-token map (rows sum to 1, or to 1 - lambda with a negative entry, as DIFF's can), by hand.
  const int64_t T = 5;
  const std::vector<float> map = {1.0f,  0,    0,     0,    0,  //
                                  0.3f,  0.7f, 0,     0,    0,  //
                                  0.2f,  0.5f, 0.3f,  0,    0,  //
                                  0.1f,  0.6f, -0.1f, 0.4f, 0,  //
                                  0.05f, 0.7f, 0.05f, 0.1f, 0.1f};
  // Row 3 with the answer at key 1: |row| sums to 1.2; answer 0.6 / 1.2; noise (keys 0 and 2) 0.0 / 1.2.
  const auto r3 = difflens::query_row_share(&map[3 * T], 3, {1, 2});
  CHECK(r3.answer == Approx(0.5));
  CHECK(r3.noise == Approx(0.0).margin(1e-7));
  for (int64_t q = 0; q < T; ++q)
    for (int64_t a0 = 0; a0 < T; ++a0)
      for (int64_t a1 = a0 + 1; a1 <= T; ++a1) {
        const auto mine = difflens::query_row_share(&map[static_cast<size_t>(q * T)], q, {a0, a1});
        const auto ref = difflens::attention_share(map.data(), T, {q}, {a0, a1}, {q, T});
        INFO("q " << q << " answer " << a0 << "-" << a1);
        CHECK(mine.answer == Approx(ref.answer).margin(1e-7));
        CHECK(mine.noise == Approx(ref.noise).margin(1e-7));
      }
}

TEST_CASE("exact tiles: a tile that fails is not started again until another is asked for", "[app][long]") {
  using difflens::app::TileService;
  // A trace that kept neither maps nor queries and keys: every tile of it fails.
  auto trace = std::make_shared<difflens::Trace>();
  trace->token_ids = {1, 2, 3, 4};
  trace->layers.resize(1);
  trace->config.num_attention_heads = 1;
  TileService tiles;
  const TileService::Key key{trace.get(), 0, 0, 0, 2, 0, 2};
  CHECK(tiles.get(trace, key) == nullptr);
  CHECK(tiles.started() == 1);
  for (int i = 0; i < 5000 && tiles.error().empty(); ++i) {  // the UI asks once per frame
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK(tiles.get(trace, key) == nullptr);
  }
  REQUIRE_FALSE(tiles.error().empty());
  for (int frame = 0; frame < 100; ++frame) CHECK(tiles.get(trace, key) == nullptr);
  CHECK(tiles.started() == 1);  // no retry loop after the failure
  const TileService::Key other{trace.get(), 0, 0, 1, 2, 0, 2};
  CHECK(tiles.get(trace, other) == nullptr);
  CHECK(tiles.started() == 2);
}

TEST_CASE("bar labels: at their bar's tip, one line further per clash, the other side, never overlapping",
          "[app][layout][labels]") {
  using difflens::app::BarLabel;
  using difflens::app::place_bar_labels;
  // Two labels on the same bar position (top at y 100): the first just above it (100 - 3 - 10 = 87), the
  // second one line higher (87 - 13 = 74).
  auto s = place_bar_labels({{50, 100, 120, 20, false}, {52, 100, 120, 20, false}}, 10, 0, 200, 0, 200, 3);
  REQUIRE(s.size() == 2);
  CHECK((s[0].placed && s[0].x0 == 40 && s[0].y0 == 87));
  CHECK((s[1].placed && s[1].x0 == 42 && s[1].y0 == 74));
  // Clamped into [x_min, x_max]; a negative bar's label goes under its bottom (120 + 3).
  s = place_bar_labels({{2, 100, 120, 20, false}, {199, 100, 120, 20, true}}, 10, 0, 200, 0, 200, 3);
  CHECK(s[0].x0 == 0);
  CHECK((s[1].x0 == 180 && s[1].y0 == 123));
  // No room above (y_min 95): the other side; no room on either side: left out.
  s = place_bar_labels({{50, 100, 120, 20, false}}, 10, 0, 200, 95, 200, 3);
  CHECK((s[0].placed && s[0].y0 == 123));
  s = place_bar_labels({{50, 100, 120, 20, false}}, 10, 0, 200, 95, 125, 3);
  CHECK_FALSE(s[0].placed);
  // Wider than the chart: left out.
  CHECK_FALSE(place_bar_labels({{50, 100, 120, 300, false}}, 10, 0, 200, 0, 200, 3)[0].placed);
  // Many labels: the placed ones stay inside and never overlap; the first (highest priority) is placed.
  std::vector<BarLabel> many;
  for (int i = 0; i < 60; ++i)
    many.push_back({static_cast<float>((i * 37) % 300), static_cast<float>(60 + (i * 53) % 120),
                    static_cast<float>(190 + (i * 7) % 20), static_cast<float>(15 + (i * 11) % 40),
                    i % 5 == 0});
  s = place_bar_labels(many, 12, 0, 300, 20, 230, 3);
  CHECK(s[0].placed);
  int placed = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!s[i].placed) continue;
    ++placed;
    CHECK(s[i].x0 >= 0);
    CHECK(s[i].x0 + many[i].w <= 300);
    CHECK(s[i].y0 >= 20);
    CHECK(s[i].y0 + 12 <= 230);
    for (size_t j = 0; j < i; ++j)
      if (s[j].placed) {
        const bool apart = s[i].x0 >= s[j].x0 + many[j].w || s[j].x0 >= s[i].x0 + many[i].w ||
                           s[i].y0 >= s[j].y0 + 12 || s[j].y0 >= s[i].y0 + 12;
        CHECK(apart);
      }
  }
  CHECK(placed >= 10);
}

TEST_CASE("bar labels: the largest |weights| besides the answer and the query, by hand",
          "[app][layout][labels]") {
  using difflens::app::labelled_keys;
  const std::vector<float> row = {0.5f, -0.02f, 0.1f, -0.3f, 0.05f, 0.3f, 0.01f};
  // Answer [2, 4) and query 6 left out (the caller labels them); the rest by |value|: 0 (0.5), 5 (0.3), 4.
  CHECK(labelled_keys(row, 6, 2, 4, 3) == std::vector<int>{0, 5, 4});
  // No answer; |-0.3| ties 0.3: the earlier key first; the query (3) is not among them.
  CHECK(labelled_keys({0.1f, 0.3f, -0.3f, 0.9f}, 3, -1, -1, 2) == std::vector<int>{1, 2});
  // Top larger than what is left: all of it.
  CHECK(labelled_keys({0.1f, 0.2f, 0.3f}, 2, 1, 9, 8) == std::vector<int>{0});
  CHECK(labelled_keys({}, 0, -1, -1, 8).empty());
}

TEST_CASE("bar labels: a piece is labelled as the whole word it belongs to", "[app][layout][labels]") {
  using difflens::app::word_label;
  using difflens::app::word_of;
  const std::string sp = "\xE2\x96\x81";  // SentencePiece's word start
  const std::vector<std::string> pieces = {"<s>",    sp + "the", sp + "cur", "ric", "ulum",   ".",
                                           sp + "7", "1",        "8",        "2",   sp + "is"};
  const std::vector<std::string> labels = {"<s>", " the", " cur", "ric", "ulum", ".",
                                           " 7",  "1",    "8",    "2",   " is"};
  CHECK(word_of(pieces, 3) == std::pair<int, int>{2, 5});  // "ric" is in " curriculum"
  CHECK(word_of(pieces, 2) == std::pair<int, int>{2, 5});
  CHECK(word_of(pieces, 5) == std::pair<int, int>{5, 6});   // punctuation stands alone
  CHECK(word_of(pieces, 8) == std::pair<int, int>{6, 10});  // the code's digits make one word
  CHECK(word_of(pieces, 10) == std::pair<int, int>{10, 11});
  CHECK(word_of(pieces, 0) == std::pair<int, int>{0, 1});
  CHECK(word_label(labels, 2, 5) == "curriculum");  // the leading space left out
  CHECK(word_label(labels, 6, 10) == "7182");
  // GPT-2's byte-level mark starts a word too; out of range: the piece alone.
  CHECK(word_of({"\xC4\xA0Hello", "world", "\xC4\xA0x"}, 1) == std::pair<int, int>{0, 2});
  CHECK(word_of(pieces, 40) == std::pair<int, int>{40, 41});
}

TEST_CASE("map axes: ticks at round token numbers, placed inside pooled cells", "[app][layout]") {
  using difflens::app::axis_ticks;
  // An exact axis: token t at t + 0.5.
  auto exact = axis_ticks(0, 11, 3, [](int64_t u) { return u; });
  REQUIRE(exact.size() == 3);
  CHECK((exact[0].token == 0 && exact[0].at == 0.5));
  CHECK((exact[1].token == 5 && exact[1].at == 5.5));
  CHECK((exact[2].token == 10 && exact[2].at == 10.5));
  // Three cells over 5800 tokens (first tokens 0, 1933, 3866, then 5800): 0, 2000, 4000, not 1933, 3866.
  const std::vector<int64_t> starts = {0, 1933, 3866, 5800};
  auto pooled = axis_ticks(0, 3, 4, [&](int64_t u) { return starts[static_cast<size_t>(u)]; });
  REQUIRE(pooled.size() == 3);
  CHECK(pooled[0].token == 0);
  CHECK(pooled[1].token == 2000);
  CHECK(pooled[2].token == 4000);
  CHECK(pooled[1].at == Approx(1 + (2000 - 1933 + 0.5) / 1933.0));
  CHECK(pooled[2].at == Approx(2 + (4000 - 3866 + 0.5) / 1934.0));
  // A zoomed view of cells [1, 3): ticks from token 1933 on.
  auto zoomed = axis_ticks(1, 2, 3, [&](int64_t u) { return starts[static_cast<size_t>(u)]; });
  REQUIRE_FALSE(zoomed.empty());
  CHECK(zoomed.front().token >= 1933);
  CHECK(zoomed.back().token <= 5799);
  CHECK(axis_ticks(0, 0, 3, [](int64_t u) { return u; }).empty());
}

TEST_CASE("model cards: each bundled model says what it retrieves, in agreement with its model card",
          "[app][card]") {
  using difflens::app::read_model_card;
  using difflens::app::view_line;
  const std::string models = DIFFLENS_SOURCE_DIR "/assets/models";
  // The numbers the lines carry are the model card's: README.md's ship-criterion table, one row a model
  // ("| diff-small | 1.00 | 0.98 | 0.74 | ..." at 256 / 512 / 1024 tokens).
  std::ifstream in(models + "/README.md");
  std::stringstream readme;
  readme << in.rdbuf();
  const std::string card = readme.str();
  const size_t table = card.find("| model | 256 tokens | 512 tokens | 1024 tokens |");
  REQUIRE(table != std::string::npos);
  for (const char* name : {"diff-small", "diff-v2-small", "baseline-small"}) {
    INFO(name);
    const auto c = read_model_card(models + "/" + name);
    REQUIRE(c);
    const size_t at = card.find(std::string("| ") + name + " | ", table);
    REQUIRE(at != std::string::npos);
    const size_t first = at + std::string(name).size() + 5;
    const std::string at_256 = card.substr(first, 4), at_512 = card.substr(first + 7, 4);
    CHECK(std::stod(at_256) >= 0.9);  // the ship criterion
    CHECK(std::stod(at_512) >= 0.9);
    CHECK(c->summary.find("held-out single needles at 256 / 512 tokens: " + at_256 + " / " + at_512) !=
          std::string::npos);
    CHECK(c->brief.find("single needles at 256 / 512 tokens: " + at_256 + " / " + at_512) !=
          std::string::npos);
    CHECK(difflens::app::brief_line(*c) == c->brief);
    CHECK(difflens::app::card_line(*c) == (c->caveat.empty() ? c->summary : c->summary + ": " + c->caveat));
    CHECK(c->card_path == models + "/README.md");
  }
  // Where the card finds the DIFF model's strongest head weaker than the baseline's (unlike the paper), its
  // line says so; the baseline's has nothing to add.
  const auto diff = read_model_card(models + "/diff-small");
  const auto base = read_model_card(models + "/baseline-small");
  CHECK(diff->caveat.find("unlike the paper's DIFF") != std::string::npos);
  CHECK(base->caveat.empty());
  // Beside the Outliers view: the direction and the size of the gap against the paper's Table 5, as the
  // card's README says it; beside the head scores: the card's finding on induction heads.
  // Either direction is stated with the paper's for comparison (the shipped DIFF's hidden states are larger
  // than the baseline's: "unlike the paper's DIFF"), and it agrees with the card's Table 5 readout.
  const std::string outliers = view_line(*diff, "outliers");
  const bool smaller = outliers.find("as the paper's DIFF, but by ") != std::string::npos;
  CHECK((smaller || outliers.find("not smaller on both, unlike the paper's DIFF") != std::string::npos));
  CHECK(outliers.find("8x and 2x") != std::string::npos);
  std::smatch ratios;
  REQUIRE(std::regex_search(
      card, ratios,
      std::regex(R"(Against the paper's Table 5: diff-small's largest \|attention logit\| is )"
                 R"(([0-9.]+) of the baseline's and its largest \|hidden state\| ([0-9.]+))")));
  CHECK(smaller == (std::stod(ratios[1].str()) < 1 && std::stod(ratios[2].str()) < 1));
  const bool no_induction = card.find("have no induction head") != std::string::npos ||
                            card.find("has no induction head") != std::string::npos;
  CHECK((view_line(*diff, "heads").find("no induction head") != std::string::npos) == no_induction);
  CHECK(view_line(*diff, "no-such-view").empty());
  // No card, or a broken one: nothing, or a line that says what is wrong.
  CHECK_FALSE(read_model_card(models).has_value());
  CHECK_FALSE(read_model_card("").has_value());
  difflens::test::ScratchDir dir("card");
  std::ofstream(dir / "card.json") << "{\"summary\": 3}";
  const auto broken = read_model_card(dir.path().string());
  REQUIRE(broken);
  CHECK(broken->summary ==
        (dir / "card.json").string() + ": not a model card (a JSON object with a \"summary\" text)");
  std::ofstream(dir / "card.json") << "{\"summary\": \"s\"}";
  const auto plain = read_model_card(dir.path().string());
  CHECK((plain && plain->summary == "s" && plain->caveat.empty() && plain->card_path.empty()));
  CHECK(difflens::app::brief_line(*plain) == "s");
}

TEST_CASE("typing: an edit runs at once after fast runs, after the debounce after slow ones or none",
          "[app][typing]") {
  using difflens::app::debounce_seconds;
  CHECK(debounce_seconds(0) == difflens::app::kDebounceSeconds);  // no run yet: its cost is unknown
  CHECK(debounce_seconds(-1) == difflens::app::kDebounceSeconds);
  CHECK(debounce_seconds(38) == 0);  // the bundled models at 256 tokens on 2 cores
  CHECK(debounce_seconds(99.9) == 0);
  CHECK(debounce_seconds(100) == difflens::app::kDebounceSeconds);
  CHECK(debounce_seconds(2100) == difflens::app::kDebounceSeconds);      // a long prompt: typing on coalesces
  CHECK(debounce_seconds(38, true) == difflens::app::kDebounceSeconds);  // a run in progress (a long paste)
}
