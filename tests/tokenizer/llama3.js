// llama3.js — the LLaMA 3 tokenizer's files and reference ids, from npm's
// llama3-tokenizer-js 1.2.0 (its vocabById, in GPT-2's byte-to-unicode
// spelling, and its merges in rank order).
//
//   node llama3.js files MODULE_PREFIX OUTDIR
//       OUTDIR/tokenizer.json — Hugging Face's format: model.vocab (the
//       128,000 ordinary tokens), model.merges ("a b" strings, rank order),
//       added_tokens (the 256 special tokens, ids 128000..128255);
//       OUTDIR/tokenizer.model — Meta's (tiktoken's) format: "BASE64 RANK"
//       per ordinary token, rank = id.
//   node llama3.js encode MODULE_PREFIX INPUT OUTPUT
//       the package's ids for INPUT's text (special tokens recognised, no
//       <|begin_of_text|> or <|end_of_text|> added), one per line; the time
//       it took on standard error ("oracle: N ids in S s").
//
// MODULE_PREFIX is the folder `npm install --prefix` filled (fetch_llama3.sh).
// The file's bytes become a string the way Node does it (Buffer.toString:
// every maximal ill-formed UTF-8 subpart -> one U+FFFD).
'use strict';
const fs = require('fs');
const path = require('path');

function load(prefix) {
  const bundle = path.resolve(prefix, 'node_modules', 'llama3-tokenizer-js', 'bundle',
                              'commonjs-llama3-tokenizer-with-baked-data.cjs');
  return require(bundle).llama3Tokenizer;
}

// GPT-2's bytes_to_unicode: code point -> byte
function unicodeToBytes() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n++); }
  const m = new Map();
  bs.forEach((b, i) => m.set(cs[i], b));
  return m;
}

function files(prefix, out) {
  const t = load(prefix);
  const u2b = unicodeToBytes();
  const nbase = 128000;
  if (t.vocabById.length !== nbase + 256) throw Error(`vocabById has ${t.vocabById.length} tokens`);
  const vocab = {};
  const model = [];
  for (let id = 0; id < nbase; id++) {
    const s = t.vocabById[id];
    vocab[s] = id;
    const bytes = Buffer.from([...s].map((c) => {
      const b = u2b.get(c.codePointAt(0));
      if (b === undefined) throw Error(`token ${id} has a character outside the byte alphabet`);
      return b;
    }));
    model.push(`${bytes.toString('base64')} ${id}\n`);
  }
  const merges = [...t.merges.entries()].sort((a, b) => a[1] - b[1]).map((e) => e[0]);
  const added = [];
  for (let id = nbase; id < t.vocabById.length; id++)
    added.push({id, content: t.vocabById[id], single_word: false, lstrip: false, rstrip: false,
                normalized: false, special: true});
  const json = {version: '1.0', truncation: null, padding: null, added_tokens: added,
                normalizer: null, model: {type: 'BPE', dropout: null, unk_token: null,
                continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false,
                byte_fallback: false, ignore_merges: true, vocab, merges}};
  fs.mkdirSync(out, {recursive: true});
  fs.writeFileSync(path.join(out, 'tokenizer.json'), JSON.stringify(json, null, 2) + '\n');
  fs.writeFileSync(path.join(out, 'tokenizer.model'), model.join(''));
  console.error(`llama3.js: ${nbase} tokens, ${merges.length} merges, ${added.length} special ` +
                `tokens -> ${out}/tokenizer.json, tokenizer.model`);
}

function encode(prefix, input, output) {
  const t = load(prefix);
  const text = fs.readFileSync(input).toString('utf8');
  const t0 = process.hrtime.bigint();
  const ids = t.encode(text, {bos: false, eos: false});
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  fs.writeFileSync(output, ids.join('\n') + (ids.length ? '\n' : ''));
  console.error(`oracle: ${ids.length} ids in ${s.toFixed(3)} s ` +
                `(${(Buffer.byteLength(text) / 1e6 / s).toFixed(2)} MB/s)`);
}

const argv = process.argv.slice(2);
if (argv[0] === 'files' && argv.length === 3) files(argv[1], argv[2]);
else if (argv[0] === 'encode' && argv.length === 4) encode(argv[1], argv[2], argv[3]);
else {
  console.error('usage: node llama3.js files MODULE_PREFIX OUTDIR | encode MODULE_PREFIX INPUT OUTPUT');
  process.exit(2);
}
