#!/usr/bin/env bash
# cpu_vs_torch.sh — trident vs PyTorch, CPU training throughput on the same
# GPT-2 models, measured in the same run (docs/benchmarks.md, "CPU training vs
# PyTorch").
#
#   tests/bench/cpu_vs_torch.sh [--build DIR] [--work DIR] [--rounds N]
#                               [--steps N] [--warmup N] [--threads N]
#                               [--models "small 124m"] [--precisions "fp32 bf16"]
#                               [--torch-bf16-steps N] [--report-only]
#
# Models: small = 6 layers, dim 384, 6 heads, vocab 256, T 256, batch 4
#         124m  = GPT-2 124M: 12 layers, 768, 12 heads, vocab 50257, T 64, batch 4
# trident: one rank, --threads OpenMP threads (run.threads); PyTorch:
# tests/bench/torch_gpt2_bench.py with the same thread count for intra-op
# and OpenBLAS. Precisions: fp32 (trident fp32 vs torch float32) and bf16
# (trident training.precision: bf16 vs torch.autocast("cpu", bfloat16), both
# with fp32 master weights; gemm_rate --dtype bf16). --torch-bf16-steps N
# (default: --steps) times only N steps after one warm-up step of PyTorch's
# autocast run: on a CPU without bf16 hardware its bf16 matmuls are 20-40x
# slower than its fp32 (26 s per small-model step measured on AVX2). Both run under the same environment, PyTorch's best:
#   OMP_WAIT_POLICY=PASSIVE, MALLOC_MMAP_MAX_=0, MALLOC_TRIM_THRESHOLD_=16 GiB.
# PyTorch runs without the machine's OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
# (a machine may set Haswell for other programs; an AVX-512 CPU then ran
# PyTorch on AVX2 kernels): the torch script names the CPU's kernel family
# (SkylakeX with AVX-512) and reports the one OpenBLAS uses (openblas_core).
#
# Each round runs, per model, trident, then PyTorch, then the matmul rate
# probe (gemm_rate), so that the host's load (shared machines) hits all of
# them alike; the table gives medians over rounds of each run's median step:
#   tok/s      batch·T / median timed step (warm-up steps excluded; a step
#              is forward + backward + clip + AdamW for both)
#   peak RSS   getrusage ru_maxrss of each process
#   roofline   trident's model FLOP/s (6·params + 12·L·T·C per token: the
#              standard, non-causal count) / gemm_rate's FLOP-weighted rate of
#              the back-end's matmul on the model's own linear-layer and LM-head
#              shapes (fwd + both bwd), same threads
#   best ratio trident's fastest timed step over torch's (both over all
#              rounds): the least load-sensitive comparison on a shared host
#   load       /proc/loadavg (1 min) at the start of each run: min–max
# --report-only prints the table again from WORK/results.jsonl.
# Raw results: WORK/results.jsonl. Exit 0 when everything ran (the targets are
# reported, not enforced), non-zero on a failed run.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build-bench
WORK=
ROUNDS=3
STEPS=12
WARMUP=3
THREADS=2
MODELS="small 124m"
PRECISIONS="fp32 bf16"
TORCH_BF16_STEPS=
PY=/usr/bin/python3
REPORT_ONLY=0

while [ $# -gt 0 ]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --precisions) PRECISIONS=$2; shift 2 ;;
    --torch-bf16-steps) TORCH_BF16_STEPS=$2; shift 2 ;;
    --report-only) REPORT_ONLY=1; shift ;;
    -h|--help) sed -n '2,41p' "$0"; exit 0 ;;
    *) echo "cpu_vs_torch.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$WORK" ] || WORK=$BUILD/cpu_vs_torch
mkdir -p "$WORK"
RES=$WORK/results.jsonl

export OMP_WAIT_POLICY=PASSIVE
export MALLOC_MMAP_MAX_=0
export MALLOC_TRIM_THRESHOLD_=17179869184

TRIDENT=$BUILD/trident
GEMM_RATE=$BUILD/tests/gemm_rate
if [ ! -x "$TRIDENT" ] || [ ! -x "$GEMM_RATE" ]; then
  echo "== building trident and gemm_rate in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -DTD_ENABLE_CUDA=OFF > "$WORK/cmake.log"
  cmake --build "$BUILD" -j"$THREADS" --target trident gemm_rate >> "$WORK/cmake.log"
fi

# ---- data ---------------------------------------------------------------------
SMALL_DATA=$WORK/small.h5
BIG_DATA=$WORK/random50257.bin
if [ ! -f "$SMALL_DATA" ]; then
  "$TRIDENT" prepare --out "$SMALL_DATA" /usr/share/common-licenses > "$WORK/prepare.log"
fi
if [ ! -f "$BIG_DATA" ]; then
  "$PY" - "$BIG_DATA" <<'EOF'
import sys, numpy as np
np.random.default_rng(1).integers(0, 50257, size=1 << 20, dtype=np.uint16).tofile(sys.argv[1])
EOF
fi

# model: name L C NH V T B data
model_args() {
  case $1 in
    small) echo "small 6 384 6 256 256 4 $SMALL_DATA" ;;
    124m) echo "124m 12 768 12 50257 64 4 $BIG_DATA" ;;
    *) echo "cpu_vs_torch.sh: unknown model $1 (small, 124m)" >&2; return 2 ;;
  esac
}

load1() { cut -d' ' -f1 /proc/loadavg; }

run_trident() { # name L C NH V T B data round precision
  local out=$WORK/trident_$1_${10}_r$9 load
  rm -rf "$out"
  load=$(load1)
  "$TRIDENT" train "$ROOT/inputs/small.yaml" --set data.train="$8" \
    --set model.layers="$2" --set model.dim="$3" --set model.heads="$4" \
    --set model.vocab_size="$5" --set model.seq_len="$6" --set training.global_batch="$7" \
    --set training.steps=$((STEPS + WARMUP)) --set schedule.warmup=1 \
    --set logging.every=1 --set eval.every=0 --set eval.batches=1 \
    --set checkpoint.every=0 --set checkpoint.resume=never \
    --set run.out_dir="$out" --set run.threads="$THREADS" \
    --set training.precision="${10}" > "$out.log" 2>&1 ||
    { echo "trident failed, see $out.log" >&2; tail -5 "$out.log" >&2; return 1; }
  "$PY" - "$out/metrics.jsonl" "$WARMUP" "$1" "$9" "$load" "${10}" >> "$RES" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
timed = [r["step_ms"] for r in rows if r["step"] > int(sys.argv[2])]
tok = rows[-1]["tokens"] / rows[-1]["step"]
med = statistics.median(timed)
print(json.dumps({"who": "trident", "model": sys.argv[3], "round": int(sys.argv[4]),
                  "prec": sys.argv[6],
                  "load": float(sys.argv[5]), "step_ms_median": med, "step_ms_min": min(timed),
                  "tokens_per_s": tok / med * 1e3, "steps": len(timed),
                  "peak_rss_bytes": max(r["mem_bytes"] for r in rows)}))
EOF
}

run_torch() {
  local out=$WORK/torch_$1_${10}_r$9 load ac=() steps=$STEPS warm=$WARMUP
  [ "${10}" = bf16 ] && ac=(--autocast)
  if [ "${10}" = bf16 ] && [ -n "$TORCH_BF16_STEPS" ]; then steps=$TORCH_BF16_STEPS warm=1; fi
  load=$(load1)
  # the reference at its best: the machine's OPENBLAS_CORETYPE/L2_SIZE (set
  # here to Haswell, for other programs) would hold PyTorch's OpenBLAS to
  # AVX2 kernels; without them torch_gpt2_bench.py names the CPU's family
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
  "$PY" "$ROOT/tests/bench/torch_gpt2_bench.py" --layers "$2" --dim "$3" --heads "$4" \
    --vocab "$5" --seq-len "$6" --batch "$7" --steps "$steps" --warmup-steps "$warm" \
    --threads "$THREADS" ${ac[@]+"${ac[@]}"} > "$out.json" 2> "$out.log" ||
    { echo "torch failed, see $out.log" >&2; tail -5 "$out.log" >&2; return 1; }
  "$PY" - "$out.json" "$1" "$9" "$load" "${10}" >> "$RES" <<'EOF'
import json, sys
r = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
r.update({"who": "torch", "model": sys.argv[2], "round": int(sys.argv[3]),
          "load": float(sys.argv[4]), "prec": sys.argv[5]})
print(json.dumps(r))
EOF
}

run_rate() {
  local load
  load=$(load1)
  "$GEMM_RATE" --layers "$2" --dim "$3" --vocab "$5" --tokens $(($6 * $7)) \
    --threads "$THREADS" --reps 5 --dtype "${10}" |
    "$PY" -c 'import json,sys; r=json.loads(sys.stdin.read()); r.update({"who": "gemm_rate", "model": sys.argv[1], "round": int(sys.argv[2]), "load": float(sys.argv[3]), "prec": sys.argv[4]}); print(json.dumps(r))' \
      "$1" "$9" "$load" "${10}" >> "$RES"
}

[ "$REPORT_ONLY" = 1 ] || : > "$RES"
[ "$REPORT_ONLY" = 1 ] || {
echo "== trident vs PyTorch, $THREADS threads, $ROUNDS rounds x ($WARMUP warm-up + $STEPS timed steps)"
echo "   $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores," \
  "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; results: $RES"
for r in $(seq 1 "$ROUNDS"); do
  for m in $MODELS; do
    for p in $PRECISIONS; do
      a=$(model_args "$m")
      # shellcheck disable=SC2086
      { run_trident $a "$r" "$p" && run_torch $a "$r" "$p" && run_rate $a "$r" "$p"; } || exit 1
      echo "   round $r $m $p: done (load $(load1))"
    done
  done
done
}

"$PY" - "$RES" "$MODELS" "$PRECISIONS" <<'EOF'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    r.setdefault("prec", "fp32")  # results written before precisions were measured
shapes = {"small": (6, 384, 256, 256), "124m": (12, 768, 50257, 64)}  # L, C, V, T
print()
hdr = ("model", "precision", "trident tok/s", "torch tok/s", "ratio", "best ratio",
       "trident RSS", "torch RSS", "trident GFLOP/s", "gemm GFLOP/s", "roofline", "load")
print("| " + " | ".join(hdr) + " |")
print("|" + "|".join("---" for _ in hdr) + "|")
for m in sys.argv[2].split():
    for p in sys.argv[3].split():
        L, C, V, T = shapes[m]
        params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
        fpt = 6 * params + 12 * L * T * C
        sel = lambda who: [r for r in rows if r["who"] == who and r["model"] == m and r["prec"] == p]
        tr, to, ra = sel("trident"), sel("torch"), sel("gemm_rate")
        if not (tr and to and ra):
            continue
        ttok = st.median(r["tokens_per_s"] for r in tr)
        otok = st.median(r["tokens_per_s"] for r in to)
        # ratio: median over rounds of the per-round ratio (they ran back to back)
        ratios = [a["tokens_per_s"] / b["tokens_per_s"] for a in tr for b in to
                  if a["round"] == b["round"]]
        gf = st.median(r["gflops"] for r in ra)
        tflops = ttok * fpt * 1e-9
        loads = [r["load"] for r in tr + to + ra]
        best = min(r["step_ms_min"] for r in to) / min(r["step_ms_min"] for r in tr)
        path = ra[0].get("bf16_path", "") if p == "bf16" else ""
        print("| %s | %s | %.0f | %.0f | %.2fx | %.2fx | %.0f MiB | %.0f MiB | %.1f | %.1f | %.0f%% | %.1f-%.1f |" % (
            m, p + (" (%s)" % path if path else ""), ttok, otok, st.median(ratios), best,
            max(r["peak_rss_bytes"] for r in tr) / 2**20,
            max(r["peak_rss_bytes"] for r in to) / 2**20, tflops, gf, 100 * tflops / gf,
            min(loads), max(loads)))
print()
cores = sorted({str(x.get("openblas_core")) for x in rows if x["who"] == "torch"})
print("PyTorch's OpenBLAS kernel family (openblas_get_corename): " + ", ".join(cores))
print()
print("per round (tok/s trident / torch, gemm GFLOP/s):")
for m in sys.argv[2].split():
    for p in sys.argv[3].split():
        for r in sorted({x["round"] for x in rows if x["model"] == m and x["prec"] == p}):
            g = {x["who"]: x for x in rows if x["model"] == m and x["round"] == r and x["prec"] == p}
            if len(g) == 3:
                print("  %-5s %s round %d: %7.0f / %7.0f = %.2fx, %.0f GFLOP/s, load %.1f" % (
                    m, p, r, g["trident"]["tokens_per_s"], g["torch"]["tokens_per_s"],
                    g["trident"]["tokens_per_s"] / g["torch"]["tokens_per_s"],
                    g["gemm_rate"]["gflops"], g["trident"]["load"]))
EOF
