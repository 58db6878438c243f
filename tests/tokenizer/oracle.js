// oracle.js — the reference ids of npm's gpt-3-encoder for a file.
//
//   node oracle.js MODULE_PREFIX INPUT OUTPUT       ids, one per line
//   node oracle.js --classes OUTPUT                 JavaScript's \s, \p{L}, \p{N}
//
// MODULE_PREFIX is the folder `npm install --prefix` filled (fetch.sh). The
// file's bytes become a string the way Node does it (Buffer.toString:
// every maximal ill-formed UTF-8 subpart -> one U+FFFD; a BOM is kept).
//
// gpt-3-encoder's encode() appends with Array.concat, quadratic in the number
// of ids, so a text over 1 MiB is encoded in chunks of about 8 KiB, cut only
// where encode() itself must cut: after a "\n" that follows a non-space and precedes a
// non-space ("x\nY": the regex matches "x", then "\n" alone, then starts
// afresh at "Y"; a chunk ending in "x\n" ends with the same pieces). The test
// corpus is smaller: one call, exactly as shipped.
//
// --classes writes "first last class" ranges (class L, N or S; the rest is
// other) of the regex classes as this Node's Unicode tables define them, for
// test_bpe --classes to compare with libutf8proc's.
'use strict';
const fs = require('fs');
const path = require('path');

function classes(out) {
  const lines = [];
  let start = -1, prev = '';
  const flush = (end) => { if (prev) lines.push(`${start.toString(16)} ${end.toString(16)} ${prev}`); };
  for (let c = 0; c <= 0x10ffff; c++) {
    let k = '';
    if (c < 0xd800 || c > 0xdfff) {
      const s = String.fromCodePoint(c);
      k = /\s/u.test(s) ? 'S' : /\p{L}/u.test(s) ? 'L' : /\p{N}/u.test(s) ? 'N' : '';
    }
    if (k !== prev) { flush(c - 1); start = c; prev = k; }
  }
  flush(0x10ffff);
  fs.writeFileSync(out, lines.join('\n') + '\n');
  console.error(`oracle: classes of Unicode ${process.versions.unicode} (Node ${process.version}) -> ${out}`);
}

function main() {
  const argv = process.argv.slice(2);
  if (argv[0] === '--classes' && argv.length === 2) return classes(argv[1]);
  if (argv.length !== 3) {
    console.error('usage: node oracle.js MODULE_PREFIX INPUT OUTPUT | --classes OUTPUT');
    process.exit(2);
  }
  const { encode } = require(path.resolve(argv[0], 'node_modules', 'gpt-3-encoder'));
  const text = fs.readFileSync(argv[1]).toString('utf8');
  const t0 = process.hrtime.bigint();
  const ids = [];
  const CHUNK = text.length > 1 << 20 ? 1 << 13 : text.length;
  const ws = (ch) => /\s/u.test(ch);
  for (let start = 0; start < text.length;) {
    let end = text.length;
    if (text.length - start > CHUNK) {
      let p = text.indexOf('\n', start + CHUNK);
      while (p !== -1 && !(p + 1 < text.length && !ws(text[p - 1]) && !ws(text[p + 1])))
        p = text.indexOf('\n', p + 1);
      if (p !== -1) end = p + 1;
    }
    for (const id of encode(text.slice(start, end))) ids.push(id);
    start = end;
  }
  const s = Number(process.hrtime.bigint() - t0) / 1e9;
  const bytes = fs.statSync(argv[1]).size;
  fs.writeFileSync(argv[2], ids.map(String).join('\n') + '\n');
  console.error(`oracle: gpt-3-encoder: ${bytes} bytes -> ${ids.length} ids in ${s.toFixed(3)} s ` +
                `(${(bytes / 1e6 / s).toFixed(2)} MB/s)`);
}

main();
