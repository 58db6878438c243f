#!/usr/bin/env python3
"""llama3_corpus.py OUT — the LLaMA 3 tokenizer's test corpus (bytes, deterministic).

GPT-2's hard corpus (make_corpus.py: scripts, emoji, combining marks, Unicode
spaces, ill-formed UTF-8, long pieces) followed by what LLaMA 3's
pre-tokenizer treats differently: digit runs (cut in threes), contractions
in upper and mixed case, a non-letter glued before letters ("(word", "_id",
"$x"), punctuation followed by line breaks, white space runs ending in CR/LF,
CRLF files, code, and its special tokens (real ones, and look-alikes that
are text: reserved_special_token_248..250 and _00 are not special), each a
few times in different company. Nothing assigned after Unicode 15.0."""
import importlib.util
import os
import random
import sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("make_corpus", os.path.join(here, "make_corpus.py"))
mc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mc)

EXTRA = [
    "digits: 1 12 123 1234 12345 123456 1234567 3.14159 2026-12-07 1,000,000 0x7fff 1e-9 ١٢٣٤٥ ٦٧ ۱۲۳۴ १२३४५ ½¾ ²³ Ⅻ",
    "contractions: IT'S DON'T WE'RE THEY'VE I'M WE'LL HE'D It'S we'Re they'VE 'S 'T 'Re 'vE 'Ll 'D o'clock",
    "glued: (word) [list] {dict} _id __init__ $x @user #tag %d &amp; *bold* ~tilde `code` \\path /usr/bin",
    "punct+breaks: end.\nnext!\n\nagain?\r\nok;\r\n\r\n...\n---\n\n***\n",
    "spaces+breaks: a \n b  \n\n c\t\n d \r\n e   \n\n\n f\n \n g",
    "crlf:\r\nline one\r\nline two\r\n\r\n  indented\r\n\tTabbed\r\n",
    "code: for (int i = 0; i < n; ++i) { x[i] = y[i] * 2.5f; }  // loop\nif __name__ == \"__main__\":\n    main()\n",
    "json: {\"role\": \"user\", \"content\": \"Hi!\"}, [1, 2, 3], {\"a\":{\"b\":null}}",
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are helpful.<|eot_id|>",
    "<|start_header_id|>user<|end_header_id|>\n\nWhat's 2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>",
    "specials: <|end_of_text|> <|eom_id|> <|python_tag|> <|finetune_right_pad_id|> <|reserved_special_token_0|> <|reserved_special_token_247|>",
    "look-alikes (text): <|reserved_special_token_248|> <|reserved_special_token_250|> <|reserved_special_token_00|> <|eot|> <|EOT_ID|> < |eot_id|> <|eot_id| >",
    "glued specials:abc<|eot_id|>def<|eot_id|><|eot_id|>  <|eot_id|>\n<|begin_of_text|>x",
]


def main():
    mc_out = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "corpus.gpt2.tmp")
    rnd = random.Random(20261207)
    saved = sys.argv
    sys.argv = [saved[0], mc_out]
    mc.main()
    sys.argv = saved
    with open(mc_out, "rb") as f:
        out = bytearray(f.read())
    os.unlink(mc_out)
    pieces = [s.encode() for s in EXTRA]
    for rep in range(3):
        order = pieces[:]
        rnd.shuffle(order)
        for p in order:
            out += rnd.choice([b"\n", b" ", b"", b"\r\n", b"  ", b"\t"])
            out += p
    words = b" ".join(pieces).split(b" ")
    for _ in range(800):
        out += rnd.choice(words) + rnd.choice([b" ", b" ", b"\n", b"", b"\r\n", b"  "])
    out += b"\n\n   "
    with open(sys.argv[1], "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
