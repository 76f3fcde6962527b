#!/usr/bin/env node
// Token ids from the Hugging Face `tokenizers` library (its Rust core, through the official Node
// binding) for each line of a corpus, as JSON lines {"ids": [...], "offsets": [[begin, end], ...]} with
// byte offsets - the format of `difflens tokenize --lines --format jsonl --no-bos`.
//
//   node reference.js TOKENIZER_JSON CORPUS            print the reference
//   node reference.js TOKENIZER_JSON CORPUS OURS.jsonl  compare: exit 1 and show the first differences
//   --whole (first argument): the corpus is one text, newlines included (`difflens tokenize` without --lines)
//
// Special tokens are not added (no post-processor); added tokens in the text are matched as usual.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

let whole = false;

function lines(path) {
  const text = fs.readFileSync(path, 'utf8');
  if (whole) return [text];
  const out = text.split('\n');
  if (out.length && out[out.length - 1] === '') out.pop();  // a final newline ends the last line
  return out;
}

// The library reports offsets in characters (code points); convert them to UTF-8 byte offsets.
function byteOffsets(line, offsets) {
  const chars = Array.from(line);
  const at = [0];
  for (const c of chars) at.push(at[at.length - 1] + Buffer.byteLength(c, 'utf8'));
  return offsets.map(([b, e]) => [at[b], at[e]]);
}

async function reference(tokenizerPath, corpusPath) {
  const tok = Tokenizer.fromFile(tokenizerPath);
  const out = [];
  for (const line of lines(corpusPath)) {
    const enc = await tok.encode(line, null, { addSpecialTokens: false });
    out.push({ ids: enc.getIds(), offsets: byteOffsets(line, enc.getOffsets()) });
  }
  return out;
}

// Offsets agree when the ranges are equal or one holds the other: the library gives every byte of a
// character split over several tokens the whole character's range, we give each token its own bytes.
function offsetsAgree(a, b) {
  return (a[0] <= b[0] && b[1] <= a[1]) || (b[0] <= a[0] && a[1] <= b[1]);
}

async function main() {
  const args = process.argv.slice(2);
  if (args[0] === '--whole') {
    whole = true;
    args.shift();
  }
  const [tokenizerPath, corpusPath, oursPath] = args;
  if (!tokenizerPath || !corpusPath) {
    console.error('usage: node reference.js [--whole] TOKENIZER_JSON CORPUS [OURS.jsonl]');
    process.exit(2);
  }
  const ref = await reference(tokenizerPath, corpusPath);
  if (!oursPath) {
    for (const r of ref) process.stdout.write(JSON.stringify(r) + '\n');
    return;
  }
  const ours = fs.readFileSync(oursPath, 'utf8').split('\n').filter((l) => l.length).map((l) => JSON.parse(l));
  const text = lines(corpusPath);
  if (ours.length !== ref.length) {
    console.error(`line counts differ: reference ${ref.length}, ours ${ours.length}`);
    process.exit(1);
  }
  let tokens = 0, badLines = 0, badOffsets = 0;
  for (let i = 0; i < ref.length; ++i) {
    tokens += ref[i].ids.length;
    if (JSON.stringify(ref[i].ids) !== JSON.stringify(ours[i].ids)) {
      if (++badLines <= 10)
        console.error(`line ${i + 1}: ${JSON.stringify(text[i]).slice(0, 120)}\n  reference ${JSON.stringify(ref[i].ids)}\n  ours      ${JSON.stringify(ours[i].ids)}`);
      continue;
    }
    for (let t = 0; t < ref[i].ids.length; ++t) if (!offsetsAgree(ref[i].offsets[t], ours[i].offsets[t])) ++badOffsets;
  }
  console.log(`${ref.length} lines, ${tokens} reference tokens: ${ref.length - badLines} lines with identical ids, ` +
              `${badLines} differing; offsets disagreeing on ${badOffsets} tokens of the identical lines`);
  process.exit(badLines || badOffsets ? 1 : 0);
}

main().catch((e) => { console.error(e.message || e); process.exit(2); });
