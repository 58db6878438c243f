/* main.c — the trident executable: MPI start-up, sub-command dispatch, and
 * the one place where the job ends (docs/architecture.md, invariant 3).
 *
 * An error that every rank agreed on (td_agree) ends every rank with one
 * message from rank 0 and the status's exit code; an error one rank found
 * alone is printed with that rank's trace and ends the job with MPI_Abort. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/cli/td_cli.h"
#include "app/train/td_signals.h"
#include "io/td_h5.h"
#include "parallel/td_mpi.h"
#include "td_build.h"
#include "td_log.h"

typedef struct {
  const char *name;
  td_cmd_fn fn;
  const char *usage;
  const char *help;
} command;

static const command k_commands[] = {
    {"train", td_cmd_train, "trident train DECK [--set key.path=value]...",
     "Train the model of DECK on dp×cp×tp×pp MPI ranks; resumes per checkpoint.resume.\n"
     "  --set key.path=value   override a deck value (repeatable), e.g. --set training.steps=10\n"
     "  --dump FILE            (testing) write initial weights, batches, losses and step-0\n"
     "                         gradients to FILE for tests/reference/check_train.py\n"},
    {"check", td_cmd_check,
     "trident check DECK [--set key.path=value]... [--json] [--ranks-per-node N] | trident check --schema",
     "Validate DECK without training: print the resolved deck, the grid map (rank → dp, cp,\n"
     "tp, pp), the parameter count, the memory each rank will allocate (parameters, gradients,\n"
     "optimizer state, ZeRO working buffers, activations) and FLOPs per token and step.\n"
     "  --schema               print every deck key with type, default, range and meaning\n"
     "  --ranks                print only the number of ranks the deck needs (dp·cp·tp·pp)\n"
     "  --ranks-per-node N     on one process, a deck needing more ranks is reported on a\n"
     "                         virtual grid of its ranks: N ranks per node in the node map\n"
     "                         (default 8)\n"
     "  --json                 print each rank's memory (bytes, as training allocates it) as\n"
     "                         one JSON object instead of the report\n"},
    {"eval", td_cmd_eval,
     "trident eval DECK [--checkpoint PATH] [--json] [--task choice FILE [--scores OUT]] "
     "[--set ...]",
     "Validation loss of a checkpoint (default: the latest of checkpoint.dir) over the first\n"
     "eval.batches × training.global_batch windows of the validation tokens: the mean over\n"
     "the targets a chat dataset's loss mask keeps (all of them otherwise).\n"
     "  --checkpoint PATH      the checkpoint to evaluate: a file, a checkpoint folder or a\n"
     "                         run folder (their latest)\n"
     "  --json                 print one JSON object with step, val_loss, val_tokens\n"
     "  --task choice FILE     multiple choice instead (HellaSwag's JSONL: ctx, endings,\n"
     "                         label): each ending scored by the mean loss of its tokens\n"
     "                         after the context; prints acc and acc_norm (per byte)\n"
     "  --scores OUT           with --task: each example's mean losses, as JSON lines\n"},
    {"generate", td_cmd_generate,
     "trident generate --checkpoint PATH [--prompt TEXT] [--tokens N] [--temperature T] "
     "[--top-k K] [--seed S] [--raw]",
     "Sample text from a checkpoint: bytes, or the GPT-2 or LLaMA 3 tokenizer the\n"
     "checkpoint carries (trained on data prepared with --tokenizer gpt2 or llama3).\n"
     "The text is valid UTF-8: a character split over tokens is held until complete,\n"
     "what stays invalid prints U+FFFD.\n"
     "Runs on tensor- and pipeline-parallel grids (--set parallel.tp=2 --set parallel.pp=2)\n"
     "and prints the same text on each; deterministic for a seed.\n"
     "  --checkpoint PATH      a checkpoint file, a checkpoint folder or a run folder (latest)\n"
     "  --prompt TEXT          the text to continue (default: a newline; an empty prompt\n"
     "                         starts from <|endoftext|> with the GPT-2 tokenizer,\n"
     "                         <|begin_of_text|> with LLaMA 3's, else a newline)\n"
     "  --tokens N             tokens to sample (default 200)\n"
     "  --temperature T        softmax temperature; 0 is greedy (default 1.0)\n"
     "  --top-k K              sample among the K most likely tokens; 0: all (default 0)\n"
     "  --seed S               the sampling seed (default 1234)\n"
     "  --raw                  print the sampled tokens' bytes as they are\n"
     "  --set key.path=value   e.g. parallel.tp=2 (parallel.cp > 1 is refused)\n"},
    {"prepare", td_cmd_prepare,
     "trident prepare --out FILE [--val-fraction F] [--tokenizer bytes|gpt2|llama3 --vocab FILE "
     "[--merges vocab.bpe]] INPUT...",
     "Turn text files, folders (recursively) or - (stdin) into a token dataset (HDF5):\n"
     "/tokens, and the last F of the tokens in /val_tokens. Tokenizer: bytes (vocabulary\n"
     "256, the default); GPT-2's BPE from its published encoder.json (--vocab) and\n"
     "vocab.bpe (--merges) (vocabulary 50257; each file one document after\n"
     "<|endoftext|>); or LLaMA 3's from Meta's tokenizer.model or Hugging Face's\n"
     "tokenizer.json (--vocab, either; vocabulary 128256, uint32 ids; each file one\n"
     "document between <|begin_of_text|> and <|end_of_text|>; special tokens spelled\n"
     "in the text are recognised). The tokenizer's files are kept in /tokenizer and\n"
     "travel on into checkpoints.\n"},
    {"export", td_cmd_export, "trident export --checkpoint PATH --out DIR [--dtype fp32|bf16]",
     "Write a checkpoint's model as Hugging Face files, after verifying its checksums:\n"
     "DIR/model.safetensors and DIR/config.json — GPT-2 (names transformer.*, the tied\n"
     "lm_head left out, GPT2LMHeadModel) or LLaMA (LlamaForCausalLM). PATH: a checkpoint\n"
     "file, a checkpoint folder or a run folder (their latest).\n"
     "  --dtype fp32|bf16      the stored precision (default fp32)\n"},
    {"plan", td_cmd_plan,
     "trident plan DECK --cluster FILE [--ranks N] [--top K] [--json] [--emit] [--set ...]",
     "Which grid to run: every configuration of N ranks (dp, cp, tp, pp, ZeRO stage, sequence\n"
     "parallelism, recomputation, micro-batch, schedule) predicted on the cluster FILE, best\n"
     "first: memory per rank (as training allocates it), step time, tokens/s, TFLOP/s and\n"
     "MFU per device, pipeline bubble, communication exposed/total (docs/plan.md).\n"
     "  --cluster FILE         the machine (inputs/clusters/*.yaml)\n"
     "  --ranks N              ranks to plan for (default: the cluster's nodes × devices)\n"
     "  --top K                print the best K (default 10)\n"
     "  --json                 a JSON array, best first, one object per configuration\n"
     "  --emit                 print the --set overrides of the best configuration\n"
     "  --set parallel.k=v     predict this one configuration of the deck instead\n"
     "  --cluster-set k.k=v    set one key of the cluster file (e.g. links.overlap_tp=1)\n"
     "  --calibrate            measure this machine (gemm rates, memory bandwidth, MPI\n"
     "                         latency/bandwidth, the process baseline) and print a\n"
     "                         cluster file: mpiexec -n 2 trident plan --calibrate\n"
     "  --device cuda          with --calibrate: measure the GPUs instead (gemm rates by\n"
     "                         shape, bandwidth, fused attention, NCCL all-reduce)\n"},
    {"ckpt", td_cmd_ckpt, "trident ckpt info PATH [--full]",
     "Show a checkpoint (a file, a checkpoint folder or a run folder: their latest) after\n"
     "verifying every checksum: its step, model, the grid it was saved on (dp × cp × tp × pp,\n"
     "ZeRO) and its tensors.\n"
     "  --full                 also the whole deck and every tensor with its shape and\n"
     "                         checksum status\n"},
};
#define NCOMMANDS ((int)(sizeof k_commands / sizeof k_commands[0]))

static void print_usage(FILE *out) {
  fprintf(out,
          "trident %s — train GPT-2 and LLaMA models on a data × context × tensor × pipeline parallel grid\n\n"
          "usage: mpiexec -n K trident COMMAND [options]\n\ncommands:\n",
          TD_VERSION);
  for (int i = 0; i < NCOMMANDS; ++i) fprintf(out, "  %s\n", k_commands[i].usage);
  fprintf(out,
          "\n  trident --version      build configuration\n"
          "  trident COMMAND --help help for one command\n\n"
          "exit codes: 0 done, 2 bad input (usage, deck, dataset, checkpoint), 3 runtime\n"
          "failure, 75 stopped by a signal after a checkpoint was committed (rerun to resume)\n");
}

static void print_version(void) {
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  char *nl = strchr(mpi, '\n');
  if (nl) *nl = '\0';
  printf("trident %s (%s, %s build)\n", TD_VERSION, TD_GIT_DESCRIBE, TD_BUILD_TYPE);
  printf("  cpu matmul: %s\n", TD_MATMUL_LIB);
#if defined(TD_CUDA_EMULATED)
  printf("  cuda: emulated (module libtrident_cuda.so: kernels/cuda compiled for the CPU "
         "emulation of tests/cudaemu; a test build, no GPU is used)\n");
#elif defined(TD_HAVE_CUDA)
  printf("  cuda: built (module libtrident_cuda.so: cuBLASLt; loaded for run.device: cuda)\n");
#else
  printf("  cuda: disabled\n");
#endif
  printf("  hdf5: %s (parallel)\n  mpi: %s\n", TD_HDF5_VERSION, mpi);
}

/* A bound on MPI_Finalize, called when this rank's work, files and output
 * are done: MPICH 4.0's UCX netmod can close an endpoint whose TCP peer has
 * already left finalize, and then waits in it for ever (seen between hosts
 * on the test cluster, tests/cluster, mostly after `check`; never within
 * one host, where UCX uses shared memory). The thread ends the process with
 * its exit code TD_FINALIZE_S seconds (default 30) later; the ranks waiting
 * for it in the launcher's barrier end the same way. (A world barrier
 * before MPI_Finalize made the hang more frequent there, not less.) */
static int g_finalize_code;
static void *finalize_bound(void *arg) {
  double s = *(const double *)arg;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
  fprintf(stderr, "trident: warning: MPI_Finalize did not return within %.0f s after the job's "
          "work ended (TD_FINALIZE_S); exiting with %d\n", s, g_finalize_code);
  _exit(g_finalize_code);
  return NULL;
}

static void finalize(td_app *app, int code) {
  static double bound_s = 30.0;
  const char *e = getenv("TD_FINALIZE_S");
  if (e && atof(e) > 0) bound_s = atof(e);
  g_finalize_code = code;
  fflush(stdout); /* _exit would not */
  fflush(stderr);
  MPI_Comm_free(&app->world);
  pthread_t th;
  if (pthread_create(&th, NULL, finalize_bound, &bound_s) == 0) pthread_detach(th);
  MPI_Finalize();
}

/* End the job for status st (see the file comment). Never returns on abort. */
static int finish(td_app *app, td_status st) {
  if (st == TD_OK) {
    finalize(app, 0);
    return 0;
  }
  int code = td_status_exit_code(st);
  int show_trace = code == 3 || getenv("TD_TRACE") != NULL;
  if (td_error_is_agreed()) {
    if (app->rank == 0 && st == TD_STOPPED) {
      fprintf(stderr, "trident: %s\n", td_error_message());
    } else if (app->rank == 0) {
      fprintf(stderr, "trident: error: %s\n", td_error_message());
      if (show_trace && td_error_trace()[0]) fprintf(stderr, "%s", td_error_trace());
      fflush(stderr);
    }
    finalize(app, code);
    return code;
  }
  fprintf(stderr, "[rank %d] trident: error: %s\n%s", app->rank, td_error_message(),
          td_error_trace());
  fprintf(stderr, "[rank %d] trident: this rank failed alone; aborting the job (exit %d)\n",
          app->rank, code);
  fflush(stderr);
  MPI_Abort(app->world, code);
  return code;
}

/* Open MPI's MPI-IO (OMPIO) opens a shared-file-pointer module with every
 * file. Its default, "sm", guards the pointer with a POSIX semaphore named
 * after the file's base name alone (/dev/shm/sem.OMPIO_<name>, shared by
 * every job on the node): a rank killed while a checkpoint is open leaves it
 * taken, and from then on every save of a file of that name on that node
 * waits for ever (a job killed while saving step 4 and resumed from step 2
 * hangs at step 4). HDF5 never moves a shared file pointer, so trident leaves
 * "sm" out unless the user chose the components (OMPI_MCA_sharedfp). Read by
 * MPI_Init; the same on every rank. */
static void mpi_defaults(void) {
#ifdef OPEN_MPI
  setenv("OMPI_MCA_sharedfp", "^sm", 0);
#endif
}

int main(int argc, char **argv) {
  int provided = 0;
  td_signals_block();
  mpi_defaults();
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "trident: error: MPI_Init failed\n");
    return 3;
  }
  td_app app = {MPI_COMM_NULL, 0, 1};
  /* OpenMP threads never call MPI; the watchdog thread calls only MPI_Abort,
   * which every MPI we know allows from any thread when the job is ending. */
  if (provided < MPI_THREAD_FUNNELED) {
    fprintf(stderr, "trident: error: the MPI library provides thread level %d, trident needs "
            "MPI_THREAD_FUNNELED (%d): use an MPI built with thread support\n", provided,
            MPI_THREAD_FUNNELED);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &app.world);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(app.world, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(app.world, &app.rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(app.world, &app.size);
  if (rc != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING] = "";
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fprintf(stderr, "trident: error: setting up the world communicator failed: %s\n", text);
    MPI_Abort(MPI_COMM_WORLD, 3);
    return 3;
  }
  td_log_set_rank(app.rank, app.size);
  td_h5_init(); /* first HDF5 call of the process (see there) */
  td_signals_install(argc > 1 && strcmp(argv[1], "train") == 0);

  const char *cmd = argc > 1 ? argv[1] : NULL;
  if (!cmd || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
    if (app.rank == 0) print_usage(stdout);
    if (!cmd) {
      td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__, "no command given");
      td_error_mark_agreed();
      return finish(&app, TD_ERR_USAGE);
    }
    return finish(&app, TD_OK);
  }
  if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
    if (app.rank == 0) print_version();
    return finish(&app, TD_OK);
  }
  for (int i = 0; i < NCOMMANDS; ++i) {
    if (strcmp(cmd, k_commands[i].name) != 0) continue;
    for (int j = 2; j < argc; ++j)
      if (strcmp(argv[j], "--help") == 0 || strcmp(argv[j], "-h") == 0) {
        if (app.rank == 0) printf("usage: %s\n\n%s", k_commands[i].usage, k_commands[i].help);
        return finish(&app, TD_OK);
      }
    td_status st = k_commands[i].fn(&app, argc - 1, argv + 1);
    return finish(&app, st);
  }
  td_status st = td_error_set(TD_ERR_USAGE, __FILE__, __LINE__, __func__,
                              "unknown command '%s' (try trident --help)", cmd);
  td_error_mark_agreed(); /* every rank parsed the same argv */
  return finish(&app, st);
}
