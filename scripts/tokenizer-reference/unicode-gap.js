#!/usr/bin/env node
// Writes core/formats/unicode_gap.inc: the letters (\p{L}) and numbers (\p{N}) that the reference tokenizers'
// regex engines know and PCRE2's Unicode tables (as linked here) lack, so that core/formats/bpe can add them to
// the classes of every split pattern it compiles. Measured, not assumed: for every code point that
// Node's ICU or PCRE2 puts in \p{L} / \p{N}, it asks tiktoken (Rust's regex, through its WebAssembly
// build) and Hugging Face tokenizers (Oniguruma) whether their \p{L}+ / \p{N}+ takes it, with vocabularies
// made for the probe (a piece that is one token comes back as one id). The two references must agree
// and must take every code point PCRE2 takes; the gap is what they take beyond it.
//
//   node unicode-gap.js PCRE2_CLASSES_FILE PCRE2_UNICODE_VERSION OUT.inc
//     PCRE2_CLASSES_FILE: what pcre2_classes.c prints (scripts/tokenizer-reference/regenerate builds it)
'use strict';
const fs = require('fs');
const path = require('path');

const [classesFile, pcreVersion, outFile] = process.argv.slice(2);
if (!outFile) {
  console.error('usage: node unicode-gap.js PCRE2_CLASSES_FILE PCRE2_UNICODE_VERSION OUT.inc');
  process.exit(2);
}
const modules = process.env.NODE_MODULES || path.join(process.cwd(), 'node_modules');
const { Tiktoken } = require(path.join(modules, 'tiktoken'));
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
const version = (n) => JSON.parse(fs.readFileSync(path.join(modules, n, 'package.json'))).version;

const pcre = {};
for (const line of fs.readFileSync(classesFile, 'utf8').trim().split('\n')) {
  const [k, ...cps] = line.split(' ');
  pcre[k] = new Set(cps.map((x) => parseInt(x, 16)));
}
const icu = { L: /^\p{L}$/u, N: /^\p{N}$/u };

// The references' verdict on each candidate: does CLASS+ take PREFIX + the code point as one piece?
function tiktokenTakes(cands, cls, prefix) {
  const lines = [];
  for (let b = 0; b < 256; ++b) lines.push(Buffer.from([b]).toString('base64') + ' ' + b);
  cands.forEach((c, k) => lines.push(Buffer.from(prefix + String.fromCodePoint(c)).toString('base64') + ' ' + (256 + k)));
  const enc = new Tiktoken(lines.join('\n'), {}, cls + '+|[\\s\\S]');
  const yes = new Set();
  for (const c of cands) if (enc.encode_ordinary(prefix + String.fromCodePoint(c)).length === 1) yes.add(c);
  enc.free();
  return yes;
}
const byteChar = (() => {
  const bs = [];
  for (let b = 33; b <= 126; ++b) bs.push(b);
  for (let b = 161; b <= 172; ++b) bs.push(b);
  for (let b = 174; b <= 255; ++b) bs.push(b);
  const map = new Array(256);
  bs.forEach((b) => (map[b] = String.fromCodePoint(b)));
  let n = 0;
  for (let b = 0; b < 256; ++b) if (map[b] === undefined) map[b] = String.fromCodePoint(256 + n++);
  return map;
})();
const byteLevel = (s) => [...Buffer.from(s)].map((b) => byteChar[b]).join('');
async function tokenizersTakes(cands, cls, prefix) {
  const vocab = Object.create(null);
  let id = 0;
  for (let b = 0; b < 256; ++b) vocab[byteChar[b]] = id++;
  for (const c of cands) vocab[byteLevel(prefix + String.fromCodePoint(c))] = id++;
  const tok = Tokenizer.fromString(JSON.stringify({
    version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [
      { type: 'Split', pattern: { Regex: cls + '+|[\\s\\S]' }, behavior: 'Isolated', invert: false },
      { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false } ] },
    post_processor: null, decoder: null,
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: false, byte_fallback: false, ignore_merges: true, vocab, merges: [] } }));
  const yes = new Set();
  for (const c of cands) {
    const enc = await tok.encode(prefix + String.fromCodePoint(c), null, { addSpecialTokens: false });
    if (enc.getIds().length === 1) yes.add(c);
  }
  return yes;
}

function ranges(cps) {
  const out = [];
  for (const c of [...cps].sort((a, b) => a - b)) {
    const last = out[out.length - 1];
    if (last && last[1] === c - 1) last[1] = c;
    else out.push([c, c]);
  }
  return out;
}
const hex = (c) => c.toString(16).toUpperCase();
const spell = (rs) => rs.map(([a, b]) => (a === b ? `\\x{${hex(a)}}` : `\\x{${hex(a)}}-\\x{${hex(b)}}`)).join('');

(async () => {
  const gaps = {};
  for (const [k, cls, prefix] of [ [ 'L', '\\p{L}', 'a' ], [ 'N', '\\p{N}', '0' ] ]) {
    const cands = [];
    for (let c = 0; c < 0x110000; ++c) {
      if (c >= 0xd800 && c < 0xe000) continue;
      if (pcre[k].has(c) || icu[k].test(String.fromCodePoint(c))) cands.push(c);
    }
    const t = tiktokenTakes(cands, cls, prefix);
    const o = await tokenizersTakes(cands, cls, prefix);
    const disagree = cands.filter((c) => t.has(c) !== o.has(c));
    if (disagree.length) {
      console.error(`unicode-gap.js: tiktoken and tokenizers disagree on ${cls} for ${disagree.length} code points, e.g. U+${hex(disagree[0])}`);
      process.exit(1);
    }
    const lost = [...pcre[k]].filter((c) => !t.has(c));
    if (lost.length) {
      console.error(`unicode-gap.js: PCRE2 puts ${lost.length} code points in ${cls} that the references do not, e.g. U+${hex(lost[0])}; a gap table cannot express that`);
      process.exit(1);
    }
    const gap = cands.filter((c) => t.has(c) && !pcre[k].has(c));
    const newer = cands.filter((c) => !t.has(c) && !pcre[k].has(c));
    gaps[k] = ranges(gap);
    console.log(`${cls}: PCRE2 ${pcre[k].size}, references ${t.size} (${gap.length} more, in ${gaps[k].length} ranges), ` +
                `ICU ${process.versions.unicode} ${newer.length} more still (not in the references)`);
  }
  const text = `// Generated by scripts/tokenizer-reference/regenerate (unicode-gap.js); do not edit.
// The letters (\\p{L}) and numbers (\\p{N}) that the reference tokenizers' regex engines take and PCRE2
// ${'(Unicode ' + pcreVersion + ' tables, the PCRE2 this was generated with)'} does not, measured code point by code point:
// tiktoken ${version('tiktoken')} (Rust's regex) and tokenizers ${version('tokenizers')} (Oniguruma) agree on every one and take
// every code point PCRE2 takes. Node's ICU (Unicode ${process.versions.unicode}) has letters newer still, which the
// references do not take, and neither does DiffLens (docs/tokenizers.md: which Unicode version this is).
// core/formats/bpe.cpp adds these ranges to \\p{L} and \\p{N} in every split pattern it compiles.
constexpr const char* kGapLetters =
    R"(${spell(gaps.L)})";
constexpr const char* kGapNumbers =
    R"(${spell(gaps.N)})";
`;
  fs.writeFileSync(outFile, text);
  console.log('wrote ' + outFile);
})();
