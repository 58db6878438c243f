/* td_choice.h — multiple-choice evaluation (HellaSwag's format) of a model
 * on any grid: `trident eval DECK --task choice FILE.jsonl` and the deck's
 * eval.choice during training.
 *
 * FILE holds one example per line: {"ctx": TEXT, "endings": [TEXT, ...],
 * "label": K} (at least two endings, 0 ≤ K < their number; other fields are
 * ignored). Each ending is scored as llm.c and lm-evaluation-harness do: the
 * context's tokens — after the tokenizer's document start (GPT-2's
 * <|endoftext|>, LLaMA 3's <|begin_of_text|>; none for bytes) — then the
 * tokens of " " + ending; the model's loss on the ending's tokens. A
 * sequence longer than model.seq_len + 1 loses context from the front. The
 * prediction is the ending with the lowest mean loss per token (acc), and
 * with the lowest total loss per byte of the ending (acc_norm,
 * lm-evaluation-harness's length normalisation); ties go to the lower
 * index. */
#ifndef TD_CHOICE_H
#define TD_CHOICE_H

#include <stdint.h>

#include "app/train/td_trainer.h"
#include "io/td_bpe.h"

typedef struct td_choice_set td_choice_set;

typedef struct {
  int64_t examples, correct, correct_norm;
  double acc, acc_norm; /* correct / examples */
} td_choice_result;

/* Read and tokenize FILE (bpe NULL: bytes) for sequences of at most T + 1
 * tokens. Errors (TD_ERR_DATA "FILE:LINE: ..." naming the field): bad JSON,
 * a missing or mistyped ctx, endings or label, fewer than two endings, a
 * label out of range, an ending alone longer than T tokens, no example at
 * all. Not collective (every rank reads the same file). */
td_status td_choice_load(const char *path, td_bpe *bpe, int64_t T, td_choice_set **out);
void td_choice_destroy(td_choice_set **s);
/* Number of examples, and of scored sequences (Σ endings). */
int64_t td_choice_examples(const td_choice_set *s);
int64_t td_choice_sequences(const td_choice_set *s);
/* Example e's first sequence and number of endings. */
void td_choice_example(const td_choice_set *s, int64_t e, int64_t *first, int *nend);

/* Score every sequence on the trainer's grid (the dp ranks take contiguous
 * ranges, micro-batches of B rows, each a whole sequence) and fill r; mean
 * (may be NULL): each sequence's mean loss per ending token, identical on
 * every rank. Collective on the world. */
td_status td_trainer_choice(td_trainer *t, const td_choice_set *s, td_choice_result *r,
                            double *mean);

#endif
