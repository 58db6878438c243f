#!/usr/bin/env bash
# scaling.sh TRIDENT WORKDIR — jobs/scaling.sh (docs/benchmarks.md "Scaling
# efficiency") on the tiny deck at 1 and 2 ranks, 6 steps, strong and weak:
#   - both runs exist, trained the asked global batch (strong: the deck's 8
#     sequences at both counts; weak: 8 and 16) on the asked dp;
#   - the table's arithmetic, recomputed here from each run's metrics file:
#     tokens/s = step_tokens / median step_ms over steps 3-6, per rank = /N,
#     efficiency = per rank / the 1-rank per rank, comm share = comm_ms
#     difference / step_ms sum over the same steps (0 at 1 rank, in (0, 1)
#     at 2), and the printed table shows the same numbers as scaling.json;
#   - a rank count the deck cannot use is refused (exit 2, message).
# Environment: MPIEXEC (default mpiexec).
set -uo pipefail
# shellcheck source=tests/e2e/robust_lib.sh
source "$(dirname "$0")/robust_lib.sh"
rb_init "$@"
fail=0
for mode in strong weak; do
  out=$work/$mode
  if ! TRIDENT=$trident MPIEXEC=$mpiexec bash "$src/jobs/scaling.sh" "$src/inputs/tiny.yaml" \
      --ranks 1,2 --$mode --steps 6 --out "$out" --set "data.train=$corpus" --set run.threads=1 \
      >"$out.table" 2>"$out.err"; then
    echo "FAIL $mode: jobs/scaling.sh exited non-zero"
    tail -5 "$out.err" | sed 's/^/     | /'
    fail=1
    continue
  fi
  /usr/bin/python3 - "$out" "$mode" "$out.table" <<'EOF' || fail=1
import json, sys
out, mode, table = sys.argv[1:]
t = json.load(open(f"{out}/scaling.json"))
rows = {r["ranks"]: r for r in t["rows"]}
bad = []
if t["mode"] != mode or sorted(rows) != [1, 2]:
    bad.append(f"scaling.json: mode {t['mode']}, ranks {sorted(rows)}")
mine = {}
for n in (1, 2):
    recs = [json.loads(l) for l in open(f"{out}/n{n}/metrics.jsonl") if l.strip()]
    by = {r["step"]: r for r in recs if "loss" in r}
    if sorted(by) != [1, 2, 3, 4, 5, 6]:
        bad.append(f"{n} ranks: steps logged {sorted(by)}")
        continue
    ms = sorted(by[s]["step_ms"] for s in (3, 4, 5, 6))
    med = (ms[1] + ms[2]) / 2
    tok = by[3]["step_tokens"]
    want_tok = 8 * 64 * (n if mode == "weak" else 1)
    if tok != want_tok:
        bad.append(f"{n} ranks: {tok} tokens a step, expected {want_tok}")
    comm = (by[6]["comm_ms"] - by[2]["comm_ms"]) / sum(by[s]["step_ms"] for s in (3, 4, 5, 6))
    mine[n] = {"tokens_per_s": tok / (med / 1e3), "comm_share": comm, "step_ms": med}
    mine[n]["tokens_per_s_per_rank"] = mine[n]["tokens_per_s"] / n
for n in mine:
    mine[n]["efficiency"] = mine[n]["tokens_per_s_per_rank"] / mine[1]["tokens_per_s_per_rank"]
    for k, v in mine[n].items():
        if abs(rows[n][k] - v) > 1e-9 * max(1.0, abs(v)):
            bad.append(f"{n} ranks: {k} {rows[n][k]} in the table, {v} from the metrics")
if mine and mine[1]["comm_share"] != 0.0:
    bad.append(f"1 rank: comm share {mine[1]['comm_share']}, expected 0")
if 2 in mine and not 0.0 < mine[2]["comm_share"] < 1.0:
    bad.append(f"2 ranks: comm share {mine[2]['comm_share']} not in (0, 1)")
# the printed table: the same numbers, as printed
lines = [l.split() for l in open(table) if l.strip() and l.split()[0].isdigit()]
for l in lines:
    n, r = int(l[0]), rows[int(l[0])]
    got = [float(x) for x in l[2:7]]
    want = [r["step_ms"], r["tokens_per_s"], r["tokens_per_s_per_rank"], r["efficiency"], r["comm_share"]]
    digits = [1, 0, 0, 3, 3]
    if any(abs(g - w) > 0.51 * 10 ** -d for g, w, d in zip(got, want, digits)):
        bad.append(f"printed row {l} differs from scaling.json {want}")
if len(lines) != 2:
    bad.append(f"{len(lines)} table rows printed, expected 2")
if bad:
    print(f"FAIL {mode}: " + "; ".join(bad))
    sys.exit(1)
print(f"ok   {mode}: " + "; ".join(f"{n} rank{'s' if n > 1 else ''}: {rows[n]['tokens_per_s']:.0f} tokens/s, "
                                   f"efficiency {rows[n]['efficiency']:.3f}, comm share {rows[n]['comm_share']:.3f}"
                                   for n in sorted(rows)) + " — the table's arithmetic checks out")
EOF
done
# a rank count the deck cannot use (tp 2: odd counts)
if TRIDENT=$trident MPIEXEC=$mpiexec bash "$src/jobs/scaling.sh" "$src/inputs/tiny.yaml" --ranks 2,3 \
    --out "$work/bad" --set "data.train=$corpus" --set parallel.tp=2 >"$work/bad.out" 2>&1; then
  echo "FAIL --ranks 2,3 with tp 2 was accepted"; fail=1
elif ! grep -q "3 ranks is not a multiple of the deck's tp × pp × cp = 2" "$work/bad.out"; then
  echo "FAIL --ranks 2,3 with tp 2: $(tail -1 "$work/bad.out")"; fail=1
else
  echo "ok   --ranks 2,3 with tp 2 refused: $(grep -m1 "not a multiple" "$work/bad.out")"
fi
exit $fail
