// Commands that draw figures: render (one head of a trace bundle) and explain (step-by-step slides).
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "app/cli/commands.h"
#include "app/cli/common_options.h"
#include "app/cli/options.h"
#include "app/cli/paths.h"
#include "app/cli/run_support.h"
#include "app/reports/explain_slides.h"
#include "app/reports/head_figures.h"
#include "app/reports/text_page.h"
#include "app/worker/inference_worker.h"
#include "core/formats/atomic_file.h"
#include "core/formats/error.h"
#include "core/formats/explain.h"
#include "core/formats/trace_io.h"
#include "viz/export.h"
#include "viz/figure.h"

namespace difflens::cli {
namespace {

// --query and --answer into the page's or the figure's options (-1: not given).
template <typename Options>
void read_marks(const Args& a, Options& o) {
  o.query = a.get_int("query", -1);
  const std::vector<int> answer = a.get_int_list("answer");
  if (!answer.empty()) {
    if (answer[1] <= answer[0]) throw Error("--answer expects BEGIN,END tokens with BEGIN < END");
    o.answer_begin = answer[0];
    o.answer_end = answer[1];
  }
}

// render --html: the Text view as a self-contained page of one or two bundles of the same prompt.
int render_page(const Args& a) {
  const std::string out = a.require("html");
  check_output_file(out, "--html", {".html", ".htm"});
  std::vector<Trace> traces;
  traces.push_back(read_trace_bundle(a.require("trace")));
  if (a.has("compare")) traces.push_back(read_trace_bundle(a.require("compare")));
  app::PageOptions o;
  o.layer = a.get_int("layer");
  for (int l : a.get_int_list("layers")) o.layers.push_back(l);
  if (!o.layers.empty() && !a.has("layer"))  // --layers without --layer: the first of them shown first
    o.layer = *std::min_element(o.layers.begin(), o.layers.end());
  o.head[0] = a.get_int("head");
  o.head[1] = a.get_int("compare-head", o.head[0]);
  read_marks(a, o);
  o.direction = a.get("direction") == "to" ? WeightDirection::ToToken : WeightDirection::FromQuery;
  o.pool = std::array<HeadPool, 3>{HeadPool::Head, HeadPool::LayerMean,
                                   HeadPool::AllLayers}[a.choice_index("pool")];
  o.scale = a.choice_index("scale");
  o.max_bytes = static_cast<size_t>(a.get_double("max-mb") * 1048576.0);
  std::vector<const Trace*> shown;
  for (const Trace& t : traces) shown.push_back(&t);
  app::PageReport report;
  const std::string html = app::text_page_html(shown, o, &report);
  if (std::filesystem::path(out).has_parent_path())
    std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  write_file_atomically(out, html);
  std::printf("wrote %s (%.1f MB: %d maps of %lld tokens", out.c_str(), report.bytes / 1048576.0, report.maps,
              static_cast<long long>(traces[0].length()));
  for (const std::string& s : report.left_out) std::printf("; left out for --max-mb: %s", s.c_str());
  std::printf(")\n");
  return 0;
}

int cmd_render(const Args& a) {
  if (a.has("html")) {
    if (a.has("out")) throw Error("give --out (a figure) or --html (a page), not both");
    return render_page(a);
  }
  if (!a.has("out")) throw Error("give --out F.png|F.svg (a figure) or --html F.html (a page)");
  for (const char* page_only : {"layers", "direction", "pool", "max-mb"})
    if (a.has(page_only))
      throw Error(std::string("--") + page_only + " belongs to the page: give --html F.html with it");
  if (a.has("compare-head") && !a.has("compare")) throw Error("--compare-head needs --compare DIR");
  const std::string out = a.require("out");
  check_output_file(out, "--out", {".png", ".svg"});
  const Trace trace = read_trace_bundle(a.require("trace"));
  app::FigureOptions o;
  o.size = a.get_int("size");
  o.scale = std::array<viz::ValueScale, 3>{viz::ValueScale::Linear, viz::ValueScale::Sqrt,
                                           viz::ValueScale::Log}[a.choice_index("scale")];
  o.pooling = a.get("pooling") == "max" ? viz::Pooling::Max : viz::Pooling::Mean;
  o.clamp_percentile = a.get_double("clamp");
  o.shared_scale = !a.has("per-map-scale");
  if (a.has("vmax")) {
    if (a.has("per-map-scale"))
      throw Error("give --vmax (one end for every map) or --per-map-scale, not both");
    o.vmax = a.get_double("vmax");
  }
  if (a.get("map") != "all") o.only = a.get("map");
  const std::vector<int> zoom = a.get_int_list("zoom");
  if (!zoom.empty()) {
    if (zoom[2] < 1) throw Error("--zoom: N must be at least 1");
    o.region = {zoom[0], zoom[1], zoom[2], zoom[2]};
  }
  read_marks(a, o);
  o.label_px = static_cast<float>(a.get_double("font-px", 0));
  // The second bundle lives as long as the figure: its panels point into the trace's maps.
  const Trace compare = a.has("compare") ? read_trace_bundle(a.require("compare")) : Trace{};
  viz::HeadFigure fig = a.has("compare") ? app::compare_figure(trace, a.get_int("head"), compare,
                                                               a.get_int("compare-head", a.get_int("head")),
                                                               a.get_int("layer"), o)
                                         : app::head_figure(trace, a.get_int("layer"), a.get_int("head"), o);
  // For print: the width on the page and the smallest text on it (both or neither), at --dpi for the PNG.
  if (a.has("width-in") != a.has("font-pt")) throw Error("give --width-in and --font-pt together");
  if (a.has("width-in")) {
    if (a.has("size") || a.has("font-px"))
      throw Error("--width-in and --font-pt size the figure for print: leave out --size and --font-px");
    viz::size_for_print(fig, viz::FigureFont::standard(), a.get_double("width-in"), a.get_double("font-pt"),
                        a.get_int("dpi"));
  }
  const std::string ext = lowercase_extension(out);
  if (std::filesystem::path(out).has_parent_path())
    std::filesystem::create_directories(std::filesystem::path(out).parent_path());
  if (ext == ".svg") {
    const std::string svg =
        viz::head_figure_svg(fig, viz::FigureFont::standard(), a.get_int("max-cells"),
                             a.has("vector-cells") ? viz::SvgCells::Vector : viz::SvgCells::Raster);
    write_file_atomically(out, svg);
    char wide[48] = "";
    if (fig.width_in > 0) std::snprintf(wide, sizeof wide, ", %g in wide", fig.width_in);
    std::printf("wrote %s (%zu panels, %.1f KB%s)\n", out.c_str(), fig.panels.size(), svg.size() / 1024.0,
                wide);
  } else {
    const viz::Image img = viz::render_head_figure(fig);
    viz::write_png(out, img.rgb, img.width, img.height);
    std::printf("wrote %s (%zu panels, %dx%d)\n", out.c_str(), fig.panels.size(), img.width, img.height);
  }
  return 0;
}

Command render_command() {
  const app::FigureOptions d;
  char clamp[32];
  std::snprintf(clamp, sizeof clamp, "%g", d.clamp_percentile);
  return {
      "render",
      "draw one head of a trace bundle with token labels and legends (PNG or SVG), or the Text view as a "
      "self-contained page (HTML)",
      {required(text("trace", "DIR", "the trace bundle (capture --out)")),
       text("out", "F.png|F.svg", "the figure"),
       text("html", "F.html", "the page: the prompt shaded by attention, for a browser (no network needed)"),
       integer("layer", "L", 0, 1e6, "0", "layer"),
       integer("head", "H", 0, 1e6, "0", "head"),
       choice("map", "all|A1|A2|A", "all", "which maps (DIFF: A1, A2 and A = A1 - lambda A2)"),
       integer("size", "PX", 64, 8192, std::to_string(d.size), "each map's side in pixels"),
       choice("scale", "linear|sqrt|log", "sqrt", "colour scale"),
       choice("pooling", "max|mean", "max", "how cells pool when a map has more tokens than pixels"),
       number("clamp", "P", 1e-9, 100, clamp, "the colour scale ends at this percentile"),
       flag("per-map-scale",
            "each map its own colour scale (default: one scale for every softmax map, both models' with "
            "--compare, and one for the signed maps)"),
       number("vmax", "V", 1e-9, 1e9, "",
              "every colour scale ends at V (signed maps at \xc2\xb1V); larger values saturate, marked "
              "(vmax)"),
       number(
           "width-in", "W", 1, 100, "",
           "for print: the figure W inches wide (the SVG says so), with --font-pt: every text at least that "
           "size there; the maps take the room the labels leave"),
       number("font-pt", "P", 4, 72, "", "for print: the smallest text on the figure, points at --width-in"),
       integer("dpi", "N", 72, 1200, "300", "for print: the PNG's pixels per inch"),
       flag("vector-cells",
            "SVG: one rectangle per map cell (editable; large) instead of one embedded PNG per map"),
       int_list("zoom", "ROW,COL,N", 0, 1e9, 3, 3, "only the N x N tokens from query ROW, key COL"),
       integer("max-cells", "N", 1, 1 << 16, "256", "SVG cells per side (pooled beyond)"),
       text("compare", "DIR", "a second bundle of the same prompt, shown beside (e.g. the baseline)"),
       integer("compare-head", "H", 0, 1e6, "", "the second bundle's head (default: --head)"),
       number("font-px", "PX", 6, 64, "",
              "the figure's token labels and ticks, pixels (default: from --size)"),
       int_list("layers", "0,3", 0, 1e6, 0, 0, "the page: the layers it holds (default: --layer)"),
       integer("query", "I", 0, 1e9, "",
               "the query: marked on the figure (orange), shown first on the page (default: the last token)"),
       answer_option(),
       choice("direction", "from|to", "from",
              "the page: from the query (its row) or to its token (its column)"),
       choice("pool", "head|layer|all", "head",
              "the page: the selected head, the mean of the layer's heads or of all layers"),
       number("max-mb", "MB", 1, 256, "64",
              "the page: bound on its embedded weights (exact float32, about 2.7 T^2 bytes a map)")},
      "Give --out for a figure or --html for a page. A page holds each model's mean over all layers, the "
      "layers' means and the selected heads (refused, with the size needed, beyond --max-mb), then the "
      "layers' other heads while they fit.",
      cmd_render};
}

// Step-by-step slides of one head of each model for one query: what the app's Explain view shows.
int cmd_explain(const Args& a) {
  apply_threads(a);
  const std::string out = a.require("out");
  check_output_dir(out, "--out");
  const std::string text = prompt_text(a);
  const std::vector<std::string> dirs = model_dirs(a, 2, "DIFF_DIR,BASELINE_DIR");
  const auto [width, height] = a.get_size("size");
  auto span = [&](const char* key) {
    const std::vector<int> v = a.get_int_list(key);
    if (v.empty()) return TokenSpan{-1, -1};
    if (v[1] <= v[0]) throw Error(std::string("--") + key + " expects BEGIN,END tokens with BEGIN < END");
    return TokenSpan{v[0], v[1]};
  };
  app::ExplainInput in;
  in.answer_hint = "give --answer BEGIN,END (the answer's tokens, END excluded)";
  in.answer = span("answer");
  in.question = span("question");
  for (int s = 0; s < 2; ++s) {
    const Model m = load_model(dirs[s], device(a));
    CaptureOptions o;
    o.keep_qkv = true;
    const Trace t =
        m.capture(encode_prompt(m, app::typed_prompt(text, prompt_specials(a)), app::kTypeIds).ids, o);
    const int layer = a.get_int("layer", static_cast<int>(m.config().num_hidden_layers) - 1);
    const int head = s == 0 ? a.get_int("head") : a.get_int("base-head", a.get_int("head"));
    const int64_t query = a.get_int("query", static_cast<int>(t.length()) - 1);
    app::ExplainSide side = app::explain_side(m.config().name, &t, layer, head, query);
    if (!side.head) throw Error(dirs[s] + ": " + side.why);
    const HeadExplain& e = *side.head;
    std::printf("%s layer %d head %d query %lld: ", m.config().name.c_str(), layer, head,
                static_cast<long long>(query));
    if (e.diff && e.lambda_set)
      std::printf(
          "lambda %.4f, set by an intervention (its own: %.4f); cancelled %.4f; row of A sums to %.4f; "
          "|out| %.4f\n",
          e.lambda, e.lambda_own, e.common_sum, e.a_sum, e.out_norm);
    else if (e.v2)
      std::printf("lambda %.4f = sigma(%.4f); cancelled %.4f; row of A sums to %.4f; |out| %.4f\n", e.lambda,
                  e.lambda_logit, e.common_sum, e.a_sum, e.out_norm);
    else if (e.diff)
      std::printf("lambda %.4f = %.4f - %.4f + %.4f; cancelled %.4f; row of A sums to %.4f; |out| %.4f\n",
                  e.lambda, e.lambda_exp1, e.lambda_exp2, e.lambda_init, e.common_sum, e.a_sum, e.out_norm);
    else
      std::printf("row of A sums to %.4f; |A.V| %.4f\n", e.a_sum, e.out_norm);
    (s == 0 ? in.diff : in.base) = std::move(side);
  }
  const std::vector<std::string> files = app::export_explain_slides(in, out, width, height);
  std::printf("wrote %zu files: %s ... %s\n", files.size(), files.front().c_str(), files.back().c_str());
  return 0;
}

Command explain_command() {
  return {
      "explain",
      "step-by-step slides (PNG + SVG) of one head of each model for one query, as the app's Explain view",
      {prompt_option(), prompt_file_option(), specials_option(),
       required(text("out", "DIR", "the slides' folder")),
       text("models", "DIFF_DIR,BASELINE_DIR", "the pair (default: the bundled diff-small,baseline-small)"),
       integer("layer", "L", 0, 1e6, "", "layer (default: the last)"),
       integer("head", "H", 0, 1e6, "0", "the DIFF model's head"),
       integer("base-head", "H", 0, 1e6, "", "the baseline's head (default: --head)"),
       integer("query", "I", 0, 1e9, "", "the query token (default: the last)"), answer_option(),
       int_list("question", "BEGIN,END", 0, 1e9, 2, 2, "the question's tokens, marked"),
       size("size", 270, 8192, "1920x1080", "slide size in pixels (at least 480x270)"), device_option("cpu"),
       threads_option()},
      "Give exactly one of --prompt, --prompt-file.",
      cmd_explain};
}

}  // namespace

std::vector<Command> figure_commands() {
  return {render_command(), explain_command()};
}

}  // namespace difflens::cli
