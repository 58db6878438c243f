#!/usr/bin/env python3
"""make_corpus.py OUT — write the tokenizer test corpus (bytes, deterministic).

The hard cases of GPT-2's tokenizer, each a few times in different company:
prose, accented Latin, Greek, Cyrillic, CJK, Indic and Thai (combining marks
inside words), emoji with ZWJ sequences and skin tones, combining marks,
runs of spaces, tabs and newlines (and trailing spaces at the very end),
contractions in both cases, numbers, punctuation runs, JSON (the `","` that
gpt-3-encoder merges differently), code, Unicode spaces (U+00A0, U+2003,
U+3000, U+0085, U+FEFF — the last two are where Python's and JavaScript's
\\s differ), control bytes, astral letters and digits, long pieces (the
priority-queue BPE), and ill-formed UTF-8 (each maximal subpart becomes one
U+FFFD). Nothing assigned after Unicode 15.0 (libutf8proc 2.8's tables):
newer letters are letters to the references but not to trident."""
import random
import sys

PROSE = """\
The quick brown fox jumps over the lazy dog. It's a sentence that uses every
letter of the English alphabet, and typists have practised with it since the
late nineteenth century. Byte pair encoding (BPE) starts from single bytes and
repeatedly merges the most frequent adjacent pair; GPT-2 learned 50,000 such
merges from WebText, about 40 GB of text linked from Reddit posts with at
least three karma. "Why bytes?" you might ask -- because every string, in any
language, is a sequence of bytes, so nothing is ever out of vocabulary.
Mr. O'Neil's dog didn't bark; the dogs' owners weren't home. We'll see, they'd
said, and you're right: I'm sure we've met. Ain't that something?
"""

LINES = [
    "précis, naïve, café, façade, Ærøskøbing, Straße, crème brûlée, São Paulo, Łódź, İstanbul, Ångström",
    "ÀÉÎÕÜ àéîõü ÇÑ çñ œuvre Œuvre ﬁnancial (ligature ﬁ) ǅ ǈ (title case)",
    "Καλημέρα κόσμε· ΑΒΓΔ αβγδ ΣΊΣΥΦΟΣ σίσυφος ς",
    "Съешь же ещё этих мягких французских булок, да выпей чаю. Ёлка ёлка",
    "中文测试：你好，世界！ 日本語のテキスト、カタカナとひらがな。 한국어 문장입니다. 漢字かな交じり文",
    "Arabic: مرحبا بالعالم ١٢٣ — Hebrew: שָׁלוֹם עולם — Hindi: नमस्ते दुनिया — Thai: สวัสดีชาวโลก",
    "Tamil: வணக்கம் உலகம் — Bengali: হ্যালো বিশ্ব — Georgian: გამარჯობა — Armenian: Բարեւ",
    "emoji: 👍 👍🏽 👍🏿 👨‍👩‍👧‍👦 👩🏾‍💻 🏳️‍🌈 ❤️ 🇫🇷🇯🇵 🤷🏾‍♀️ 😀😃😄 🙂🙃 ✅ ☕ ©® ™",
    "combining: e\u0301 cafe\u0301 n\u0303 a\u0308 Z\u0351\u0353\u0321a\u0362l\u0315g\u0338o\u0334 \u0301 x\u20dd",
    "contractions: it's don't we're they've I'm we'll he'd 'tis 'twas rock 'n' roll",
    "UPPER: IT'S DON'T WE'RE THEY'VE I'M WE'LL HE'D 'S 'T 'RE 'Ve 'lL ''s '''t",
    "numbers: 12345 3.14 1,000,000 0x1F 2024-01-01 12:30:45 -7 +8 1e-9 ½ ¾ ²³ ⅷ Ⅻ ٣٤٥ ௧௨ 𝟘𝟙",
    "punctuation: !!! ??? ... --- ((())) [[ ]] {{ }} <<>> @#$%^&* ~`|\\ /// ;;; :: ,,, ''' \"\"\"",
    "“smart quotes” ‘single’ «guillemets» „German“ — em – en … ellipsis • bullet ¿qué? ¡sí!",
    "JSON: {\"a\":\"b\",\"c\":[\"d\",\"e\"],\"f\":{\"g\":1,\"h\":null}} [\"x\",\"y\",\"z\"] '\",\"' \"],[\" \"},\"",
    "code: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; } // dot product",
    "code: def f(x):\n    return x ** 2  # square\n\tif x != 0:\n\t\tpass",
    "snake_case_name CamelCaseName kebab-case-name SCREAMING_CASE e-mail@example.com",
    "https://example.com/path/to/page?q=1&r=two#frag http://localhost:8080/",
    "spaces: a\u00a0b \u00a0 x\u2003y\u3000z \u2009thin\u202fnarrow \u205fmath \u1680ogham",
    "line separators:\u2028after LS\u2029after PS\u0085after NEL; a\u0085\u0085b \u0085 c",
    "byte order marks: \ufeffmid\ufeff\ufeff \ufeff x \ufeff\n\ufeff\n",
    "controls: \x00 \x01\x02 \x1b[31mred\x1b[0m \x7f \x1c\x1d\x1e\x1f \x0b\x0c vt ff",
    "astral: 𝐀𝐁𝐂 𝒜𝓑 𝔄 𐌰𐌱𐌲 𠀀𠀁 𓀀 𝄞 🀄",
    "private use and nonchars: \ue000\ue001 \uf8ff \ufffd \ufffe \uffff",
    "<|endoftext|> is just text here <|endoftext|>",
    "mixed: ABCdef123ghi h3ll0 w0rld x86_64 C++ C# F# .NET ι18n a11y",
]

WHITESPACE = [
    "  \n\n   x", "a\t\tb", "line  \nnext", "trail   \n", "\r\n\r\nwindows\r\n",
    " \t \t x", "\n\n\n\n", "    indented", "x \n y", "  \u00a0 \u00a0x", "\t\n \tz",
    " \u3000 \u3000 q", "a \n", "\n ", " \n", "end.\n\n\n",
]

INVALID = [
    b"lone \x80 continuation", b"truncated \xe2\x82 three", b"ff \xff byte",
    b"overlong \xc0\xaf slash", b"surrogate \xed\xa0\x80 encoded", b"above \xf4\x90\x80\x80 max",
    b"overlong4 \xf0\x80\x80\x80", b"cut emoji \xf0\x9f\x98 end", b"\xe2\x82\xe2\x82\xac euro",
    b"abc\xc2", b"\xf1\x80\x80\xe1\x80\xc2 mixed", b"\x80\x80\x80 three", b"x\xc3(y",
    b"\xfe\xfe\xff\xff", b" \xc3\xa9\xe9 ", b"\xed\xbf\xbf low surrogate", b"letters\xe4\xb8",
]


def main():
    rnd = random.Random(20240601)
    out = bytearray()
    out += "\ufeffBOM at the start of the file.\n".encode()
    out += PROSE.encode()
    pieces = [s.encode() for s in LINES + WHITESPACE] + INVALID
    # each case three times, shuffled, in different company
    for rep in range(3):
        order = pieces[:]
        rnd.shuffle(order)
        for p in order:
            out += p
            out += rnd.choice([b"\n", b" ", b"  ", b"\n\n", b"\t", b"", b" \n"])
        out += PROSE.encode()
    # long pieces: letters, digits, punctuation, whitespace, base64
    out += b" " + b"a" * 300 + b" " + b"ab" * 200 + b"\n"
    out += b"9" * 250 + b" " + b"=" * 200 + b" " + b"-_" * 150 + b"\n"
    out += b" " * 100 + b"\t" * 20 + b"\n" * 30 + b"x\n"
    alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    out += bytes(rnd.choice(alphabet) for _ in range(2000)) + b"\n"
    out += "".join(rnd.choice("абвгдежзийклмнопрстуфхцчшщъыьэюя") for _ in range(400)).encode() + b"\n"
    out += "".join(rnd.choice("的一是不了人我在有他这为之大来以个中上们") for _ in range(300)).encode() + b"\n"
    # random word salad from everything above
    words = b" ".join(pieces + [PROSE.encode()]).split(b" ")
    for _ in range(1500):
        out += rnd.choice(words) + rnd.choice([b" ", b" ", b" ", b"\n", b"", b"  ", b"\t"])
    # trailing spaces at the very end of the file
    out += b"\nthe end   "
    with open(sys.argv[1], "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
