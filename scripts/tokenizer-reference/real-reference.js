#!/usr/bin/env node
// The reference token ids for the real vocabularies (made by vocabularies.js in VOCAB_DIR), on the texts of
// the corpora: each line of each file, then each file whole. Two modes: special tokens matched in the text
// (tiktoken's encode(text, "all"); tokenizers as it always does) and read as text (tiktoken's
// encode_ordinary; tokenizers with the special added tokens taken out of the file). Every vocabulary is
// run by two references where two exist, which must agree:
//   cl100k_base  tiktoken's own cl100k_base (the package's built-in encoding)
//   gpt2         tiktoken's gpt2 encoding and tokenizers on gpt2.tokenizer.json
//   llama3       tokenizers on llama3.tokenizer.json and tiktoken with Llama 3's ranks, pattern and specials
//                (Meta's own Llama 3 tokenizer is tiktoken with these)
// Writes OUT_DIR/NAME.special.jsonl ({"ids": [...]} per text, in order) and OUT_DIR/NAME.text.jsonl (only the
// texts where reading specials as text changes the ids: {"text": index, "ids": [...]}).
//
//   node real-reference.js VOCAB_DIR OUT_DIR CORPUS...
'use strict';
const fs = require('fs');
const path = require('path');

const [vocabDir, outDir, ...corpora] = process.argv.slice(2);
if (!corpora.length) {
  console.error('usage: node real-reference.js VOCAB_DIR OUT_DIR CORPUS...');
  process.exit(2);
}
const modules = process.env.NODE_MODULES || path.join(process.cwd(), 'node_modules');
const tiktoken = require(path.join(modules, 'tiktoken'));
const { Tokenizer } = require(path.join(modules, 'tokenizers'));

// The texts, as tests/test_bpe_real.cpp reads them: lines (a final newline ends the last), then wholes.
const texts = [];
for (const file of corpora) {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  if (lines.length && lines[lines.length - 1] === '') lines.pop();
  texts.push(...lines);
}
for (const file of corpora) texts.push(fs.readFileSync(file, 'utf8'));

function withoutSpecials(tokenizerJson) {
  const j = JSON.parse(fs.readFileSync(tokenizerJson, 'utf8'));
  j.added_tokens = j.added_tokens.filter((t) => !t.special);
  j.post_processor = null;
  return Tokenizer.fromString(JSON.stringify(j));
}
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const show = (s) => JSON.stringify(s.length > 80 ? s.slice(0, 80) + '...' : s);

async function run(name, refs) {
  // refs: { NAME: { special: async (text) => ids, text: async (text) => ids } }, the first written out
  const names = Object.keys(refs);
  const special = [], asText = [];
  for (let i = 0; i < texts.length; ++i) {
    const results = {};
    for (const mode of [ 'special', 'text' ]) {
      const ids = [];
      for (const r of names) ids.push(Array.from(await refs[r][mode](texts[i])));
      for (let k = 1; k < names.length; ++k)
        if (!same(ids[0], ids[k])) {
          console.error(`real-reference.js: ${name} (${mode}): ${names[0]} and ${names[k]} disagree on text ${i} ${show(texts[i])}`);
          process.exit(1);
        }
      results[mode] = ids[0];
    }
    special.push(JSON.stringify({ ids: results.special }));
    if (!same(results.special, results.text)) asText.push(JSON.stringify({ text: i, ids: results.text }));
  }
  fs.writeFileSync(path.join(outDir, name + '.special.jsonl'), special.join('\n') + '\n');
  fs.writeFileSync(path.join(outDir, name + '.text.jsonl'), asText.length ? asText.join('\n') + '\n' : '');
  console.log(`${name}: ${texts.length} texts by ${names.join(' and ')} (equal); ${asText.length} change with specials as text`);
}

const hf = (tokenizerJson) => {
  const withSpecials = Tokenizer.fromFile(tokenizerJson), plain = withoutSpecials(tokenizerJson);
  const ids = async (tok, text) => (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
  return { special: (t) => ids(withSpecials, t), text: (t) => ids(plain, t) };
};
const tt = (enc) => ({ special: async (t) => enc.encode(t, 'all'), text: async (t) => enc.encode_ordinary(t) });

(async () => {
  fs.mkdirSync(outDir, { recursive: true });
  await run('cl100k_base', { tiktoken: tt(tiktoken.get_encoding('cl100k_base')) });
  await run('gpt2', { tokenizers: hf(path.join(vocabDir, 'gpt2.tokenizer.json')),
                      tiktoken: tt(tiktoken.get_encoding('gpt2')) });
  // Llama 3 through tiktoken: ranks = ids, the tokens' bytes from the byte-level strings.
  const l3 = JSON.parse(fs.readFileSync(path.join(vocabDir, 'llama3.tokenizer.json'), 'utf8'));
  const byteOf = new Map();
  {
    const bs = [];
    for (let b = 33; b <= 126; ++b) bs.push(b);
    for (let b = 161; b <= 172; ++b) bs.push(b);
    for (let b = 174; b <= 255; ++b) bs.push(b);
    const all = new Set(bs);
    let n = 0;
    bs.forEach((b) => byteOf.set(String.fromCodePoint(b), b));
    for (let b = 0; b < 256; ++b) if (!all.has(b)) byteOf.set(String.fromCodePoint(256 + n++), b);
  }
  const ranks = Object.entries(l3.model.vocab).sort((a, b) => a[1] - b[1]).map(
      ([tok, id]) => Buffer.from([...tok].map((ch) => byteOf.get(ch))).toString('base64') + ' ' + id);
  const specials = {};
  for (const t of l3.added_tokens) specials[t.content] = t.id;
  const l3tt = new tiktoken.Tiktoken(ranks.join('\n'), specials, l3.pre_tokenizer.pretokenizers[0].pattern.Regex);
  await run('llama3', { tokenizers: hf(path.join(vocabDir, 'llama3.tokenizer.json')), tiktoken: tt(l3tt) });
})();
