#!/usr/bin/env node
// The reference tokenizers' time on one text file, as `difflens tokenize --bench` measures DiffLens's: the
// vocabulary read first (not timed in the encode figure), then the whole text encoded three times, the best.
//   node bench.js VOCAB_DIR TEXT_FILE      (VOCAB_DIR made by real-vocab; packages in $NODE_MODULES)
'use strict';
const fs = require('fs');
const path = require('path');
const [vocabDir, file] = process.argv.slice(2);
if (!file) {
  console.error('usage: node bench.js VOCAB_DIR TEXT_FILE');
  process.exit(2);
}
const modules = process.env.NODE_MODULES || path.join(process.cwd(), 'node_modules');
const tiktoken = require(path.join(modules, 'tiktoken'));
const { Tokenizer } = require(path.join(modules, 'tokenizers'));
const text = fs.readFileSync(file, 'utf8');
const bytes = Buffer.byteLength(text);
async function time(name, load, encode) {
  const t0 = process.hrtime.bigint();
  const tok = load();
  const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
  let best = Infinity, n = 0;
  for (let i = 0; i < 3; ++i) {
    const t = process.hrtime.bigint();
    n = await encode(tok);
    best = Math.min(best, Number(process.hrtime.bigint() - t) / 1e9);
  }
  console.log(`${name}: read in ${loadS.toFixed(3)} s; ${bytes} bytes -> ${n} tokens in ${best.toFixed(4)} s (best of 3; ${(bytes / 1e6 / best).toFixed(1)} MB/s)`);
}
(async () => {
  await time('cl100k_base, tiktoken', () => tiktoken.get_encoding('cl100k_base'), async (e) => e.encode(text, 'all').length);
  await time('gpt2, tiktoken', () => tiktoken.get_encoding('gpt2'), async (e) => e.encode(text, 'all').length);
  for (const v of ['gpt2', 'llama3'])
    await time(`${v}, tokenizers`, () => Tokenizer.fromFile(path.join(vocabDir, v + '.tokenizer.json')),
               async (t) => (await t.encode(text, null, { addSpecialTokens: false })).getIds().length);
})();
