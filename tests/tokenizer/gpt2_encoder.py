#!/usr/bin/env python3
"""gpt2_encoder.py ENCODER_JSON VOCAB_BPE INPUT OUTPUT — the reference ids of
OpenAI's GPT-2 tokenizer (trident's dialect "gpt2") for a file, one per line.
gpt2_encoder.py --classes OUTPUT — "first last class" ranges (hex; class L, N
or S, the rest other) of the pattern's \\s, \\p{L}, \\p{N} in this `regex`.

The algorithm of openai/gpt-2 src/encoder.py (MIT licence), unchanged: the
`regex` module's pattern, bytes_to_unicode, bpe() and encode(). The file's
bytes become a string with errors='replace' (each maximal ill-formed UTF-8
subpart -> one U+FFFD, as Node does). Needs the `regex` module; exit 77
without it."""
import json
import sys
import time

try:
    import regex as re
except ImportError:
    print("gpt2_encoder.py: the Python module 'regex' is missing (pip install regex, "
          "or Debian's python3-regex)", file=sys.stderr)
    sys.exit(77)


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(2**8):
        if b not in bs:
            bs.append(b)
            cs.append(2**8 + n)
            n += 1
    cs = [chr(n) for n in cs]
    return dict(zip(bs, cs))


def get_pairs(word):
    pairs = set()
    prev_char = word[0]
    for char in word[1:]:
        pairs.add((prev_char, char))
        prev_char = char
    return pairs


class Encoder:
    def __init__(self, encoder, bpe_merges):
        self.encoder = encoder
        self.byte_encoder = bytes_to_unicode()
        self.bpe_ranks = dict(zip(bpe_merges, range(len(bpe_merges))))
        self.cache = {}
        self.pat = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        if not pairs:
            return token
        while True:
            bigram = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float('inf')))
            if bigram not in self.bpe_ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                    new_word.extend(word[i:j])
                    i = j
                except ValueError:
                    new_word.extend(word[i:])
                    break
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            if len(word) == 1:
                break
            pairs = get_pairs(word)
        word = ' '.join(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        bpe_tokens = []
        for token in re.findall(self.pat, text):
            token = ''.join(self.byte_encoder[b] for b in token.encode('utf-8'))
            bpe_tokens.extend(self.encoder[bpe_token] for bpe_token in self.bpe(token).split(' '))
        return bpe_tokens


def classes(out):
    lines, start, prev = [], -1, ''
    s_re, l_re, n_re = re.compile(r'\s'), re.compile(r'\p{L}'), re.compile(r'\p{N}')
    for c in range(0x110000):
        k = ''
        if not 0xD800 <= c <= 0xDFFF:
            ch = chr(c)
            k = 'S' if s_re.match(ch) else 'L' if l_re.match(ch) else 'N' if n_re.match(ch) else ''
        if k != prev:
            if prev:
                lines.append(f"{start:x} {c - 1:x} {prev}")
            start, prev = c, k
    if prev:
        lines.append(f"{start:x} {0x10ffff:x} {prev}")
    with open(out, 'w') as f:
        f.write('\n'.join(lines) + '\n')


def main():
    if len(sys.argv) == 3 and sys.argv[1] == '--classes':
        return classes(sys.argv[2])
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1], 'r') as f:
        encoder = json.load(f)
    with open(sys.argv[2], 'r', encoding="utf-8") as f:
        bpe_data = f.read()
    bpe_merges = [tuple(merge_str.split()) for merge_str in bpe_data.split('\n')[1:-1]]
    enc = Encoder(encoder, bpe_merges)
    with open(sys.argv[3], 'rb') as f:
        data = f.read()
    t0 = time.perf_counter()
    ids = enc.encode(data.decode('utf-8', errors='replace'))
    s = time.perf_counter() - t0
    with open(sys.argv[4], 'w') as f:
        f.write(''.join(f"{i}\n" for i in ids))
    print(f"gpt2_encoder.py: {len(data)} bytes -> {len(ids)} ids in {s:.3f} s "
          f"({len(data) / 1e6 / s:.2f} MB/s)", file=sys.stderr)


if __name__ == "__main__":
    main()
