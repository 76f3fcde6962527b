// The shareable page of the Text view (see text_page.h).
#include "app/text_page.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "app/prediction_text.h"
#include "core/error.h"
#include "core/tiles.h"
#include "viz/text_shade.h"
#include "viz/token_text.h"
#include "viz/utf8.h"

namespace difflens::app {
namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64(const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (i + 1 < n ? uint32_t{p[i + 1]} << 8 : 0) |
                       (i + 2 < n ? uint32_t{p[i + 2]} : 0);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < n ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kB64[v & 63] : '=';
  }
  return out;
}

std::string hex(viz::Rgb8 c) {
  char s[8];
  std::snprintf(s, sizeof s, "#%02x%02x%02x", c.r, c.g, c.b);
  return s;
}

std::string model_name(const Trace& t) {
  return t.config.name.empty() ? to_string(t.config.attention) : t.config.name;
}

bool has_layer(const Trace& t, int layer) {
  return std::any_of(t.layers.begin(), t.layers.end(), [&](const LayerTrace& l) { return l.index == layer; });
}

// One head's whole map as its lower triangle (rows 0..T-1, keys 0..i), read in blocks of rows (a block's
// tile spans only the keys its rows see, so memory stays near the triangle's own).
std::vector<float> lower_triangle(const Trace& t, int layer, int head) {
  const int64_t T = t.length(), block = 128;
  std::vector<float> out(static_cast<size_t>(T * (T + 1) / 2));
  size_t k = 0;
  for (int64_t r0 = 0; r0 < T; r0 += block) {
    const int64_t rows = std::min(block, T - r0), cols = r0 + rows;
    const AttentionTile tile = attention_tile(t, layer, head, r0, rows, 0, cols);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j <= r0 + i; ++j) out[k++] = tile.a[static_cast<size_t>(i * cols + j)];
  }
  return out;
}

// The mean of maps summed in double in the order token_weights sums them, divided and cast as it does, so
// the page's means equal the Text view's weights bit for bit.
struct MeanMap {
  std::vector<double> sum;
  int count = 0;
  void add(const std::vector<float>& m) {
    if (sum.empty()) sum.assign(m.size(), 0.0);
    for (size_t i = 0; i < m.size(); ++i) sum[i] += m[i];
    ++count;
  }
  std::vector<float> mean() const {
    std::vector<float> out(sum.size());
    for (size_t i = 0; i < sum.size(); ++i) out[i] = static_cast<float>(sum[i] / count);
    return out;
  }
};

std::string list_heads(const std::vector<int>& heads) {
  std::string out;
  for (size_t i = 0; i < heads.size(); ++i) out += (i ? ", " : "") + std::to_string(heads[i]);
  return out;
}

const char* kStyle = R"CSS(
:root { --fs: 17px; }
body { font-family: "DejaVu Sans", "Segoe UI", Helvetica, Arial, sans-serif; margin: 0; background: #f2f2f2;
  color: #141414; }
header { padding: 8px 14px 4px; background: #fff; border-bottom: 1px solid #ccc; }
h1 { font-size: 18px; margin: 0 0 6px; font-weight: 600; }
.controls { display: flex; flex-wrap: wrap; gap: 6px 18px; align-items: center; font-size: 14px; }
.controls label { white-space: nowrap; }
#heads label { margin-right: 14px; }
select { font-size: 14px; }
.note { font-size: 13px; color: #666; margin-top: 4px; }
main { display: flex; flex-wrap: wrap; gap: 10px; padding: 10px; }
.panel { flex: 1 1 420px; min-width: 300px; background: #fff; border: 1px solid #ccc; padding: 8px 10px; }
.title { font-size: 15px; margin-bottom: 4px; }
.title b { font-weight: 600; }
.next { font-size: 14px; color: #555; margin-bottom: 4px; white-space: pre-wrap; }
.legend { display: flex; align-items: center; gap: 6px; font-size: 13px; margin-bottom: 6px; }
.bar { display: flex; width: 180px; height: 14px; border: 1px solid #999; }
.bar span { flex: 1; }
.text { font-size: var(--fs); line-height: 1.95; white-space: pre-wrap; word-break: break-word; max-height: 80vh;
  overflow-y: auto; border-top: 1px solid #ddd; padding-top: 4px; }
.text span { padding: 2px 0; cursor: pointer; }
.text span.out { color: #a0a0a0; }
.text span.answer { box-shadow: 0 -3px 0 #14a03c, 0 3px 0 #14a03c; }
.text span.answer-first { border-left: 3px solid #14a03c; }
.text span.answer-last { border-right: 3px solid #14a03c; }
.text span.query { outline: 2.5px solid #f08200; }
.text span.kept { outline: 1px solid rgba(240, 130, 0, 0.8); }
#selftest-result { display: none; }
)CSS";

const char* kScript = R"JS(
(function () {
  'use strict';
  const D = JSON.parse(document.getElementById('difflens-data').textContent);
  const T = D.tokens.length;
  const maps = new Map();  // decoded maps by their base64 text's key
  function decode(key, b64) {
    if (maps.has(key)) return maps.get(key);
    const bin = atob(b64), bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; ++i) bytes[i] = bin.charCodeAt(i);
    const m = new Float32Array(bytes.buffer);
    maps.set(key, m);
    return m;
  }
  const S = { query: D.query, kept: D.query, dir: D.direction, pool: D.pool, layer: D.layer,
              heads: D.models.map(m => m.head), scale: D.scale, shared: D.shared_scale, show: 'both' };
  const byId = id => document.getElementById(id);

  function layerOf(m, index) { return m.layers.find(l => l.index === index); }
  // The model's map for the current switches and its description, or an error text.
  function mapOf(mi) {
    const m = D.models[mi];
    if (S.pool === 'all') return { key: mi + '/all', b64: m.all, what: 'mean of ' + m.all_heads + ' heads over all layers' };
    const l = layerOf(m, S.layer);
    if (!l) return { error: 'layer ' + S.layer + ' is not in this page' };
    if (S.pool === 'layer') return { key: mi + '/' + l.index + '/mean', b64: l.mean,
                                     what: 'mean of layer ' + l.index + "'s " + l.mean_heads + ' heads' };
    const h = S.heads[mi];
    if (!(String(h) in l.maps)) return { error: 'head ' + h + ' of layer ' + l.index + ' is not in this page' +
                                         (l.left_out.length ? ' (left out to keep it small)' : '') };
    return { key: mi + '/' + l.index + '/' + h, b64: l.maps[String(h)], what: 'layer ' + l.index + ' head ' + h };
  }
  // Weights of the query's row (from) or its token's column (to), as the app's Text view computes them.
  function weights(mi) {
    const src = mapOf(mi);
    if (src.error) return src;
    const a = decode(src.key, src.b64), q = S.query, w = new Float64Array(T);
    let first, end;
    if (S.dir === 'from') {
      first = 0; end = q + 1;
      const o = q * (q + 1) / 2;
      for (let j = 0; j <= q; ++j) w[j] = a[o + j];
    } else {
      first = q; end = T;
      for (let i = q; i < T; ++i) w[i] = a[i * (i + 1) / 2 + q];
    }
    let top = 0;
    for (let i = first; i < end; ++i) top = Math.max(top, Math.abs(w[i]));
    return { w: w, first: first, end: end, top: top, what: src.what };
  }
  // The step of the shade table, as viz::text_shade_index.
  function step(w, hi, diverging) {
    if (isNaN(w) || (!diverging && w < 0)) return 0;
    const x = Math.min(Math.abs(w) / hi, 1);
    let f = x;
    if (S.scale === 'sqrt') f = Math.sqrt(x);
    if (S.scale === 'log') f = x <= 0 ? 0 : Math.max(0, (Math.log10(x) + D.shade.log_decades) / D.shade.log_decades);
    return Math.round(f * (D.shade.steps - 1));
  }
  function shade(w, hi, diverging) {
    const k = step(w, hi, diverging), neg = w < 0 && diverging;
    return { bg: (neg ? D.shade.neg : D.shade.pos)[k], ink: (neg ? D.shade.neg_ink : D.shade.pos_ink)[k] };
  }
  function fmt(v) { return Number(v.toPrecision(3)).toString(); }
  // What the model expected at token i and how likely the token there was (the app's hover), or ''.
  function here(m, i) { return m.here && m.here[i] ? '\n' + m.here[i] : ''; }

  // Panels: built once; render() recolours them.
  const panels = D.models.map((m, mi) => {
    const p = document.createElement('section');
    p.className = 'panel';
    p.id = 'panel-' + mi;
    const title = document.createElement('div');
    title.className = 'title';
    const next = document.createElement('div');  // what the model expects after the query
    next.className = 'next';
    const legend = document.createElement('div');
    legend.className = 'legend';
    const text = document.createElement('div');
    text.className = 'text';
    const spans = D.tokens.map((label, i) => {
      const s = document.createElement('span');
      s.textContent = label;
      s.dataset.i = i;
      text.appendChild(s);
      if (label.endsWith('\u21b5')) text.appendChild(document.createElement('br'));
      return s;
    });
    text.addEventListener('mouseover', e => {
      const i = e.target.dataset && e.target.dataset.i;
      const q = i === undefined ? S.kept : +i;  // between tokens (or lines): the kept query, as in the app
      if (q !== S.query) { S.query = q; render(); }
    });
    text.addEventListener('mouseleave', () => { if (S.query !== S.kept) { S.query = S.kept; render(); } });
    text.addEventListener('click', e => {
      const i = e.target.dataset && e.target.dataset.i;
      if (i !== undefined) { S.kept = S.query = +i; render(); }
    });
    p.append(title, next, legend, text);
    byId('panels').appendChild(p);
    return { el: p, title: title, next: next, legend: legend, text: text, spans: spans };
  });

  function drawLegend(el, hi, diverging) {
    el.textContent = '';
    const lo = document.createElement('span');
    lo.textContent = diverging ? fmt(-hi) : '0';
    const bar = document.createElement('div');
    bar.className = 'bar';
    for (let k = 0; k < 48; ++k) {
      const t = (k + 0.5) / 48, v = diverging ? (2 * t - 1) * hi : t * hi;
      const c = document.createElement('span');
      c.style.background = shade(v, hi, diverging).bg;
      bar.appendChild(c);
    }
    const up = document.createElement('span');
    up.textContent = fmt(hi) + (diverging ? '  (0 at the middle, ' : '  (') + S.scale + ' scale)';
    el.append(lo, bar, up);
  }

  function render() {
    const all = D.models.map((m, mi) => weights(mi));
    let shared = 0;
    for (const r of all) if (!r.error) shared = Math.max(shared, r.top);
    D.models.forEach((m, mi) => {
      const P = panels[mi], r = all[mi];
      P.el.style.display = S.show === 'both' || S.show === String(mi) ? '' : 'none';
      const q = S.query, label = D.tokens[q];
      P.title.textContent = '';
      const b = document.createElement('b');
      b.textContent = m.name;
      P.title.append(b, '   ' + m.what + ', ' + (r.error ? '' : r.what) + '   ' +
                     (S.dir === 'from' ? 'from query ' : 'to token ') + q + " '" + label + "'");
      // The model's top 5 after the query, as the app's Text view words them (pages of traces without
      // predictions have no such line).
      P.next.style.display = m.next ? '' : 'none';
      if (m.next) P.next.textContent = m.next[q] || 'no prediction kept after token ' + q;
      if (r.error) {
        P.legend.textContent = r.error;
        P.spans.forEach(s => { s.style.background = ''; s.style.color = ''; s.className = 'out'; });
        return;
      }
      const hi = (S.shared ? shared : r.top) || 1;
      drawLegend(P.legend, hi, m.diverging);
      P.spans.forEach((s, i) => {
        const carries = i >= r.first && i < r.end;
        let cls = carries ? '' : 'out';
        if (i >= D.answer[0] && i < D.answer[1]) cls += ' answer';
        if (i === D.answer[0]) cls += ' answer-first';
        if (i === D.answer[1] - 1) cls += ' answer-last';
        if (i === q) cls += ' query'; else if (i === S.kept) cls += ' kept';
        s.className = cls;
        if (carries) {
          const c = shade(r.w[i], hi, m.diverging);
          s.style.background = c.bg;
          s.style.color = c.ink;
          s.dataset.w = String(r.w[i]);
          s.title = 'token ' + i + " '" + D.tokens[i] + "'\n" + m.what + ' = ' + r.w[i].toFixed(5) + here(m, i);
        } else {
          s.style.background = '';
          s.style.color = '';
          delete s.dataset.w;
          s.title = 'token ' + i + " '" + D.tokens[i] + "'" +
                    (S.dir === 'from' ? ': after the query, not seen' : ': before the token, cannot read it') +
                    here(m, i);
        }
      });
    });
  }

  // The switches.
  const showSel = byId('show'), layerSel = byId('layer'), poolSel = byId('pool'), scaleSel = byId('scale');
  D.models.forEach((m, mi) => {
    const o = document.createElement('option');
    o.value = String(mi);
    o.textContent = m.name + ' only';
    showSel.appendChild(o);
  });
  for (const l of D.models[0].layers) {
    const o = document.createElement('option');
    o.value = String(l.index);
    o.textContent = 'layer ' + l.index;
    layerSel.appendChild(o);
  }
  layerSel.value = String(S.layer);
  poolSel.value = S.pool;
  scaleSel.value = S.scale;
  byId('dir-' + S.dir).checked = true;
  byId('shared').checked = S.shared;
  const headSels = D.models.map((m, mi) => {
    const wrap = document.createElement('label');
    wrap.textContent = m.name + ' head ';
    const sel = document.createElement('select');
    sel.id = 'head-' + mi;
    wrap.appendChild(sel);
    byId('heads').appendChild(wrap);
    sel.addEventListener('change', () => { S.heads[mi] = +sel.value; render(); });
    return sel;
  });
  function fillHeads() {
    D.models.forEach((m, mi) => {
      const l = layerOf(m, S.layer), sel = headSels[mi];
      sel.textContent = '';
      for (const h of l ? Object.keys(l.maps).map(Number).sort((a, b) => a - b) : []) {
        const o = document.createElement('option');
        o.value = String(h);
        o.textContent = String(h);
        sel.appendChild(o);
      }
      if (l && !(String(S.heads[mi]) in l.maps) && sel.options.length) S.heads[mi] = +sel.options[0].value;
      sel.value = String(S.heads[mi]);
      sel.disabled = S.pool !== 'head';
    });
  }
  showSel.addEventListener('change', () => { S.show = showSel.value; render(); });
  layerSel.addEventListener('change', () => { S.layer = +layerSel.value; fillHeads(); render(); });
  poolSel.addEventListener('change', () => { S.pool = poolSel.value; fillHeads(); render(); });
  scaleSel.addEventListener('change', () => { S.scale = scaleSel.value; render(); });
  for (const d of ['from', 'to'])
    byId('dir-' + d).addEventListener('change', () => { S.dir = d; render(); });
  byId('shared').addEventListener('change', () => { S.shared = byId('shared').checked; render(); });
  // The text as large as the window lets it be (up to 28 px): a short prompt reads from the back of a room.
  function fit() {
    const texts = panels.map(P => P.text);
    let fs = 28;
    for (; fs > 15; --fs) {
      document.documentElement.style.setProperty('--fs', fs + 'px');
      const room = window.innerHeight - texts[0].getBoundingClientRect().top - 24;
      if (texts.every(t => t.scrollHeight <= Math.max(room, 120))) break;
    }
    document.documentElement.style.setProperty('--fs', fs + 'px');
  }
  fillHeads();
  render();
  fit();
  window.addEventListener('resize', fit);

  // #selftest: drive the page as a user would (switches, a hover, leaving, a click) and write down what it
  // showed; it ends hovering a token, as a screenshot after a hover should.
  if (location.hash === '#selftest') {
    const result = { ok: true, failures: [], cases: [] };
    const fail = msg => { result.ok = false; result.failures.push(msg); };
    const set = (el, value) => { el.value = value; el.dispatchEvent(new Event('change')); };
    const hover = i => panels[0].spans[i].dispatchEvent(new MouseEvent('mouseover', { bubbles: true }));
    const target = D.selftest_token;
    const shown = mi => panels[mi].spans.map(s => s.dataset.w === undefined ? null : Number(s.dataset.w));
    const rgb = hexColour => 'rgb(' + [1, 3, 5].map(k => parseInt(hexColour.substr(k, 2), 16)).join(', ') + ')';
    for (const c of [['head', 'from', 'sqrt'], ['layer', 'to', 'linear'], ['all', 'from', 'log'], ['head', 'to', 'sqrt']]) {
      set(poolSel, c[0]);
      set(scaleSel, c[2]);
      const radio = byId('dir-' + c[1]);
      radio.checked = true;
      radio.dispatchEvent(new Event('change'));
      hover(target);
      if (S.query !== target) fail('hovering token ' + target + ' made ' + S.query + ' the query');
      const rec = { pool: c[0], dir: c[1], scale: c[2], query: S.query, layer: S.layer, heads: S.heads.slice(),
                    weights: [], steps: [], next: panels.map(P => P.next.style.display === 'none' ? null : P.next.textContent),
                    titles: panels.map(P => P.spans[target].title) };
      D.models.forEach((m, mi) => {
        const w = shown(mi);
        rec.weights.push(w);
        // Each shaded token's colour is the table's step for its weight.
        const r = weights(mi), hi = (S.shared ? Math.max(...D.models.map((x, k) => weights(k).top)) : r.top) || 1;
        // The shade step each token got (the C++ test checks it against viz::text_shade_index).
        rec.steps.push(panels[mi].spans.map((s, i) => i >= r.first && i < r.end ? step(r.w[i], hi, m.diverging) : null));
        for (let i = r.first; i < r.end; ++i) {
          const want = rgb(shade(r.w[i], hi, m.diverging).bg), got = getComputedStyle(panels[mi].spans[i]).backgroundColor;
          if (want !== got) { fail(m.name + ' token ' + i + ': background ' + got + ', expected ' + want); break; }
        }
        const outline = getComputedStyle(panels[mi].spans[target]).outlineStyle;
        if (outline !== 'solid') fail(m.name + ': the hovered query is not outlined');
      });
      result.cases.push(rec);
    }
    set(poolSel, D.pool);
    set(scaleSel, D.scale);
    byId('dir-' + D.direction).checked = true;
    byId('dir-' + D.direction).dispatchEvent(new Event('change'));
    panels[0].text.dispatchEvent(new MouseEvent('mouseleave'));
    result.after_leave = S.query;
    if (S.query !== S.kept) fail('leaving the text kept ' + S.query + ' as the query, not ' + S.kept);
    panels[0].spans[target].dispatchEvent(new MouseEvent('click', { bubbles: true }));
    result.after_click = S.kept;
    if (S.kept !== target) fail('a click on token ' + target + ' kept ' + S.kept);
    panels[0].spans[D.query].dispatchEvent(new MouseEvent('click', { bubbles: true }));  // the first query again
    panels[0].text.dispatchEvent(new MouseEvent('mouseleave'));
    const last = D.selftest_hover;
    hover(last);
    result.final_hover = S.query;
    byId('selftest-result').textContent = JSON.stringify(result);
  }
})();
)JS";

}  // namespace

size_t page_map_bytes(int64_t T) {
  const size_t floats = static_cast<size_t>(T) * static_cast<size_t>(T + 1) / 2;
  return (floats * 4 + 2) / 3 * 4;
}

std::string text_page_html(const std::vector<const Trace*>& traces, const PageOptions& o,
                           PageReport* report) {
  if (traces.empty() || traces.size() > 2 || !traces[0] || (traces.size() == 2 && !traces[1]))
    throw Error("a page shows one or two traces");
  const Trace& first = *traces[0];
  const int64_t T = first.length();
  if (T == 0) throw Error("the trace has no tokens: nothing to show");
  if (traces.size() == 2 && traces[1]->token_ids != first.token_ids)
    throw Error("the two traces hold different tokens (" + std::to_string(T) + " and " +
                std::to_string(traces[1]->length()) +
                "): a page shows one text, so give traces of the same prompt and tokenizer");
  const int64_t query = o.query < 0 ? T - 1 : o.query;
  if (query >= T)
    throw Error("query token " + std::to_string(query) + " is outside the " + std::to_string(T) +
                "-token prompt");
  const bool answered = o.answer_begin >= 0 && o.answer_end > o.answer_begin;
  if (answered && o.answer_end > T)
    throw Error("the answer " + viz::token_range(o.answer_begin, o.answer_end) + " lies outside the " +
                std::to_string(T) + "-token prompt");
  std::vector<int> layers = o.layers.empty() ? std::vector<int>{o.layer} : o.layers;
  std::sort(layers.begin(), layers.end());
  layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
  if (std::find(layers.begin(), layers.end(), o.layer) == layers.end())
    throw Error("layer " + std::to_string(o.layer) + " is shown first but is not among the page's layers");

  // What each model must carry (means, the selected head), then the other heads while they fit.
  const size_t per_map = page_map_bytes(T);
  struct Want {
    size_t model;
    int layer, head;  // head -1: the layer's mean; layer -1: the mean over all layers
  };
  std::vector<Want> required;
  std::vector<std::vector<Want>> optional_of(traces.size());  // per model, in layer and head order
  for (size_t m = 0; m < traces.size(); ++m) {
    const Trace& t = *traces[m];
    required.push_back({m, -1, -1});
    for (int l : layers) {
      if (!has_layer(t, l))
        throw Error(model_name(t) + ": layer " + std::to_string(l) + " is not in this trace");
      const std::vector<int> heads = kept_heads(t, l);
      if (heads.empty())
        throw Error(model_name(t) + ": this trace kept no map of layer " + std::to_string(l));
      required.push_back({m, l, -1});
      const int selected = o.head[m];
      if (l == o.layer) {
        if (std::find(heads.begin(), heads.end(), selected) == heads.end())
          throw Error(model_name(t) + ": head " + std::to_string(selected) + " of layer " +
                      std::to_string(l) + " is not in this trace (kept: " + list_heads(heads) + ")");
        required.push_back({m, l, selected});
      }
      for (int h : heads)
        if (l != o.layer || h != selected) optional_of[m].push_back({m, l, h});
    }
  }
  const size_t need = required.size() * per_map;
  if (need > o.max_bytes) {
    char msg[512];
    std::snprintf(msg, sizeof msg,
                  "a page of %lld tokens needs %.1f MB for each model's means and selected head (%zu maps of "
                  "%.1f MB: a map holds T(T+1)/2 exact weights), over the %.1f MB bound: raise the bound "
                  "(--max-mb) or choose fewer layers or a shorter prompt",
                  static_cast<long long>(T), need / 1048576.0, required.size(), per_map / 1048576.0,
                  o.max_bytes / 1048576.0);
    throw Error(msg);
  }
  // The other heads taken in turns, one model's then the other's, so a tight bound shares them fairly.
  std::vector<Want> optional;
  for (size_t i = 0;; ++i) {
    bool any = false;
    for (const auto& list : optional_of)
      if (i < list.size()) {
        optional.push_back(list[i]);
        any = true;
      }
    if (!any) break;
  }
  size_t room = o.max_bytes - need;
  std::vector<Want> kept = required, dropped;
  for (const Want& w : optional)
    if (per_map <= room) {
      kept.push_back(w);
      room -= per_map;
    } else {
      dropped.push_back(w);
    }

  nlohmann::json data;
  data["format"] = "difflens-page 1";
  data["tokens"] = viz::display_tokens(first.tokens, viz::Spaces::Visible);
  data["query"] = query;
  data["answer"] =
      answered ? std::vector<int64_t>{o.answer_begin, o.answer_end} : std::vector<int64_t>{-1, -1};
  data["direction"] = o.direction == WeightDirection::FromQuery ? "from" : "to";
  data["pool"] = o.pool == HeadPool::Head ? "head" : o.pool == HeadPool::LayerMean ? "layer" : "all";
  data["layer"] = o.layer;
  data["scale"] = std::array<const char*, 3>{"linear", "sqrt", "log"}[std::clamp(o.scale, 0, 2)];
  data["shared_scale"] = o.shared_scale;
  data["selftest_token"] = answered ? o.answer_begin : T / 2;
  // The hover a screenshot of #selftest ends on: a token the kept query is not, whose own row shows.
  data["selftest_hover"] = query > 1 ? query - 1 : query;
  nlohmann::json shade;
  shade["steps"] = viz::kTextShadeSteps;
  shade["log_decades"] = viz::kLogDecades;
  for (bool neg : {false, true})
    for (int k = 0; k < viz::kTextShadeSteps; ++k) {
      const viz::TextShade s = viz::text_shade_step(k, neg);
      shade[neg ? "neg" : "pos"].push_back(hex(s.background));
      shade[neg ? "neg_ink" : "pos_ink"].push_back(hex(s.ink));
    }
  data["shade"] = shade;

  PageReport rep;
  for (size_t m = 0; m < traces.size(); ++m) {
    const Trace& t = *traces[m];
    nlohmann::json jm;
    jm["name"] = model_name(t);
    jm["what"] = t.config.is_diff() ? "A1 \xe2\x88\x92 \xce\xbb A2" : "A";
    jm["diverging"] = t.config.is_diff();
    jm["head"] = o.head[m];
    // What the model expected: after each token (its top 5, as the Text view's line) and at each token (the
    // hover's "expected here"); left out when the trace keeps no prediction (a bundle captured without).
    std::vector<std::string> next(static_cast<size_t>(T)), here(static_cast<size_t>(T));
    bool any_next = false, any_here = false;
    for (int64_t i = 0; i < T; ++i) {
      next[static_cast<size_t>(i)] = next_after_line(t, i);
      any_next |= !next[static_cast<size_t>(i)].empty();
      here[static_cast<size_t>(i)] = expected_here(t, i);
      any_here |= !here[static_cast<size_t>(i)].empty();
    }
    if (any_next) jm["next"] = next;
    if (any_here) jm["here"] = here;
    jm["layers"] = nlohmann::json::array();
    MeanMap all;
    for (const LayerTrace& lt : t.layers) {
      const bool on_page = std::find(layers.begin(), layers.end(), lt.index) != layers.end();
      nlohmann::json jl;
      MeanMap mean;
      std::vector<int> left_out;
      jl["maps"] = nlohmann::json::object();
      for (int h : kept_heads(t, lt.index)) {
        const std::vector<float> map = lower_triangle(t, lt.index, h);
        all.add(map);
        if (!on_page) continue;
        mean.add(map);
        const bool keep = std::any_of(kept.begin(), kept.end(), [&](const Want& w) {
          return w.model == m && w.layer == lt.index && w.head == h;
        });
        if (keep) {
          jl["maps"][std::to_string(h)] = base64(map.data(), map.size() * sizeof(float));
          ++rep.maps;
        } else {
          left_out.push_back(h);
        }
      }
      if (!on_page) continue;
      const std::vector<float> mm = mean.mean();
      jl["index"] = lt.index;
      jl["mean"] = base64(mm.data(), mm.size() * sizeof(float));
      jl["mean_heads"] = mean.count;
      jl["left_out"] = left_out;
      ++rep.maps;
      if (!left_out.empty())
        rep.left_out.push_back(model_name(t) + " layer " + std::to_string(lt.index) + ": heads " +
                               list_heads(left_out));
      jm["layers"].push_back(jl);
    }
    const std::vector<float> am = all.mean();
    jm["all"] = base64(am.data(), am.size() * sizeof(float));
    jm["all_heads"] = all.count;
    ++rep.maps;
    data["models"].push_back(jm);
  }
  rep.weight_bytes = static_cast<size_t>(rep.maps) * per_map;

  // Inside <script>, "</script>" would end the element and "<!--<script>" keep it from ending: no <, > or &
  // reaches the page raw (they only occur inside JSON strings, where \u003c and the like mean the same).
  const std::string raw = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string json;
  json.reserve(raw.size());
  for (char ch : raw) {
    if (ch == '<')
      json += "\\u003c";
    else if (ch == '>')
      json += "\\u003e";
    else if (ch == '&')
      json += "\\u0026";
    else
      json += ch;
  }

  std::string names;
  for (const Trace* t : traces) names += (names.empty() ? "" : " and ") + model_name(*t);
  std::string left_note;
  for (const std::string& s : rep.left_out) left_note += (left_note.empty() ? "" : "; ") + s;
  std::string html;
  html.reserve(json.size() + 32768);
  html += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<meta name=\"generator\" content=\"DiffLens\">\n";
  html += "<title>DiffLens: " + viz::xml_text(names) + ", " + std::to_string(T) + " tokens</title>\n";
  html += "<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n<header>\n";
  html +=
      "<h1>Attention of " + viz::xml_text(names) + " over a " + std::to_string(T) + "-token prompt</h1>\n";
  html += R"(<div class="controls">
<label>show <select id="show"><option value="both">both models</option></select></label>
<span><label><input type="radio" name="dir" id="dir-from"> from the query</label>
<label><input type="radio" name="dir" id="dir-to"> to this token (who reads it)</label></span>
<label><select id="layer"></select></label>
<label><select id="pool"><option value="head">the selected head</option>
<option value="layer">mean over the layer's heads</option><option value="all">mean over all layers</option></select></label>
<span id="heads"></span>
<label>scale <select id="scale"><option value="linear">linear</option><option value="sqrt">sqrt</option><option value="log">log</option></select></label>
<label><input type="checkbox" id="shared"> one scale</label>
</div>
<div class="note">Hover a token: it becomes the query while the pointer stays on it; a click keeps it. Orange: the
query; green box: the answer. Each token's background is the weight: blue positive, red negative (DIFF's
A1 &minus; &lambda;A2 can push a token away), white 0. Means weigh every head equally; DIFF's heads each with its own &lambda;.)";
  if (!left_note.empty()) html += "<br>Left out to keep the page small: " + viz::xml_text(left_note) + ".";
  html += "</div>\n</header>\n<main id=\"panels\"></main>\n<pre id=\"selftest-result\"></pre>\n";
  html += "<script type=\"application/json\" id=\"difflens-data\">" + json + "</script>\n";
  html += "<script>" + std::string(kScript) + "</script>\n</body>\n</html>\n";
  rep.bytes = html.size();
  rep.left_out.shrink_to_fit();
  if (report) *report = rep;
  return html;
}

std::string page_data_json(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"difflens-data\">";
  const size_t a = html.find(open);
  const size_t b = a == std::string::npos ? a : html.find("</script>", a);
  if (b == std::string::npos) throw Error("not a DiffLens page: no embedded data");
  return html.substr(a + open.size(), b - a - open.size());
}

std::vector<float> decode_page_map(const std::string& text, int64_t T) {
  int value[256];
  std::fill(std::begin(value), std::end(value), -1);
  for (int i = 0; i < 64; ++i) value[static_cast<unsigned char>(kB64[i])] = i;
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    if (c == '=') break;
    const int v = value[static_cast<unsigned char>(c)];
    if (v < 0) throw Error("not base64 text in the page's data");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  const size_t n = static_cast<size_t>(T) * static_cast<size_t>(T + 1) / 2;
  if (bytes.size() != n * sizeof(float))
    throw Error("a map of the page holds " + std::to_string(bytes.size()) + " bytes, not the " +
                std::to_string(n * sizeof(float)) + " of " + std::to_string(T) + " tokens");
  std::vector<float> out(n);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace difflens::app
