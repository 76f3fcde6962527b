// The exported page's script: the Text view in a browser (app/reports/text_page.cpp embeds it at build time,
// cmake/embed_text.cmake; the tests run it in chromium and check it with `node --check`).
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
