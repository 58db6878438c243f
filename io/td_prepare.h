/* td_prepare.h — text → trident token dataset (`trident prepare`).
 *
 * The byte-level tokenizer (token = byte value, vocab_size 256), or GPT-2's
 * byte-level BPE (td_bpe.h). */
#ifndef TD_PREPARE_H
#define TD_PREPARE_H

#include <mpi.h>
#include <stddef.h>
#include <stdio.h>

#include "io/td_bpe.h"
#include "td_error.h"

/* Default read buffer of td_prepare. */
#define TD_PREPARE_BUFFER_DEFAULT ((size_t)4 << 20)

/* Tokenize inputs into a trident HDF5 dataset at out_path.
 *
 * inputs: text files, folders (walked recursively; entries sorted by byte
 * order of their names, so the result does not depend on the file system;
 * symbolic links to folders and special files inside folders are skipped and
 * logged) and "-" for standard input. Their bytes are concatenated in the
 * order given; the last floor(n · val_fraction) tokens go to /val_tokens
 * (left out when that is 0), the rest to /tokens; both 1-D uint16, chunked.
 * Root attributes: vocab_size = 256 (int64), tokenizer = "bytes". Each
 * non-empty file is a document: /documents (its first byte, < the split) and
 * /val_documents (the rest, rebased; 0 first when the split cuts a file).
 *
 * Streams through a buffer of buffer_bytes (0: TD_PREPARE_BUFFER_DEFAULT),
 * so memory does not grow with the input. Standard input (and any input that
 * is neither a regular file nor a folder, e.g. a pipe) is first spooled to an
 * unlinked temporary file next to out_path to learn its length. Writes
 * "<out_path>.tmp", then renames it over out_path; on failure the temporary
 * file is removed and out_path is untouched. An existing out_path inside an
 * input folder is not read.
 *
 * log (may be NULL): one line per input (files, bytes) and a summary
 * (tokens, train/val split, output).
 *
 * Errors: no inputs, val_fraction outside [0, 1), empty input → TD_ERR_USAGE;
 * an unreadable path, a file that changes while read, write failures →
 * TD_ERR_IO / TD_ERR_HDF5; each message names the path. Not collective: call
 * it on one process (td_h5_init() is called). */
td_status td_prepare(const char *out_path, double val_fraction, int ninputs,
                     char **inputs, size_t buffer_bytes, FILE *log);

/* The same with the GPT-2 tokenizer bpe, collective on comm (every rank
 * passes the same arguments and a loaded tokenizer). Each input file is one
 * document, preceded by <|endoftext|>; the ids are exactly td_bpe_encode's of
 * the whole file. Rank 0 lists the inputs; the concatenation is split into
 * one share per rank at places where cutting cannot change the ids (a file's
 * start, or before a printable ASCII character that follows "X\n" with X
 * printable), each rank tokenizes its share into an unlinked spool file
 * next to out_path, and all write their tokens into one file (parallel HDF5
 * when comm has more than one rank), so the result does not depend on the
 * number of ranks. Standard input or a pipe among the inputs: rank 0 alone
 * tokenizes. The last floor(n · val_fraction) tokens go to /val_tokens.
 * Root attributes: vocab_size (the tokenizer's, 50257), tokenizer ("gpt2" or
 * "gpt3-encoder": the dialect), tokenizer_sha256 (td_bpe_hash), eot_token;
 * the tokenizer's files in /tokenizer; each file's start (its first token)
 * in /documents and /val_documents, as td_prepare. A progress line (MB, tokens, MB/s,
 * ETA) every 5 s on long inputs (rank 0's share). Errors are agreed over
 * comm (td_agree); the temporary file is removed and out_path untouched. */
td_status td_prepare_bpe(MPI_Comm comm, const char *out_path, double val_fraction,
                         int ninputs, char **inputs, size_t buffer_bytes, td_bpe *bpe,
                         FILE *log);

/* The input's format (`trident prepare --format`). */
typedef enum {
  TD_PREPARE_TEXT = 0, /* plain text files, one document each (td_prepare, td_prepare_bpe) */
  TD_PREPARE_JSONL,    /* one JSON object per line, its string field `field` a document */
  TD_PREPARE_CHAT,     /* one {"messages": [{"role", "content"}, ...]} per line */
} td_prepare_format;

typedef struct {
  td_prepare_format format;
  const char *field; /* JSONL: the text's field (NULL: "text") */
  int skip_bad;      /* skip malformed lines (counted, the first 5 logged) instead of refusing */
} td_prepare_opts;

/* JSON Lines (TD_PREPARE_JSONL) or chat conversations (TD_PREPARE_CHAT) →
 * a dataset, on one process. inputs are files or "-" (standard input), read
 * line by line (blank lines skipped). Tokenizer: bpe (GPT-2 or LLaMA 3), or
 * NULL for bytes. Content is encoded with special tokens as text
 * (td_bpe_encode_text, specials 0), so a message cannot forge the
 * template's tokens.
 *
 * Each document (a JSONL record, or a conversation) ends with the
 * tokenizer's end token: <|end_of_text|> (LLaMA 3, which also starts it with
 * <|begin_of_text|>), <|endoftext|> (GPT-2), the NUL byte (bytes). A
 * conversation is rendered with LLaMA 3's chat template —
 * <|start_header_id|>ROLE<|end_header_id|>\n\n CONTENT(trimmed) <|eot_id|>
 * per message — or, for GPT-2 and bytes, the plain one: "System:\n",
 * "User:\n" or "Assistant:\n", the content, "\n\n". The loss mask is 1 on
 * each assistant message's content and its end (<|eot_id|>, or the "\n\n"),
 * 0 elsewhere; JSONL records have no mask (every token counts).
 *
 * Written: /tokens and /val_tokens (the last floor(n · val_fraction)
 * tokens), uint16 or uint32 as the vocabulary needs; /documents and
 * /val_documents (int64: the offset of each document's first token in its
 * split; a document cut by the split starts the val one); /loss_mask and
 * /val_loss_mask (uint8, chat only); attributes vocab_size, tokenizer,
 * format ("jsonl" or "chat"), eot_token (bos_token for LLaMA 3), documents,
 * skipped_lines, tokenizer_sha256 and /tokenizer (the BPEs). The tokens are
 * held in memory until written (5 bytes per token).
 *
 * Errors (TD_ERR_DATA "FILE:LINE: ...", naming the field): a line that is
 * not JSON (with its column), invalid UTF-8, not an object, a missing or
 * non-string field, "messages" missing, not an array or empty, a message
 * without role or content, a role other than system, user or assistant;
 * with skip_bad those lines are skipped and counted (attribute
 * skipped_lines, the first 5 logged). No record at all, or (chat) no
 * assistant message anywhere → error. The temporary file is removed and
 * out_path untouched on failure. */
td_status td_prepare_records(const char *out_path, double val_fraction, int ninputs,
                             char **inputs, td_bpe *bpe, const td_prepare_opts *o, FILE *log);

#endif
