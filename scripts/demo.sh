#!/usr/bin/env bash
# The main job on the embedded default: bring up the real local endpoints (the baseline and the
# candidates asked for), gate every candidate against the baseline with `evalsvc compare`, and
# end with the next steps (the dashboard, `make down`, a decision-sized run).
# llama.cpp serves the F16 baseline, an 8-bit KV cache (q8_0-kv: a faithful candidate) and 2-bit
# weights (q2_k: a candidate that breaks the model), so the table shows what a faithful candidate
# and what a `fail` look like; ENGINE=vllm serves its bf16 and fp8-kv pair.
# Exit status 0 when compare reached a verdict (its own 0 pass, 1 fail, 3 inconclusive: all
# three are a successful demo); otherwise compare's: 2 usage error, 4 infrastructure error.
set -euo pipefail
EVALSVC=${EVALSVC:-evalsvc}
ENGINE=${ENGINE:-llamacpp}   # llamacpp (any AVX2 CPU, ready in seconds) or vllm (vLLM-CPU)
# empty: llamacpp's q8_0-kv and q2_k; vllm's default candidate (fp8-kv, or w8a8 where this CPU
# cannot serve fp8-kv)
CANDIDATES=${CANDIDATES:-}
if [ -z "$CANDIDATES" ] && [ "$ENGINE" = llamacpp ]; then CANDIDATES=q8_0-kv,q2_k; fi
SUITE=${SUITE:-demo}
OUT=${OUT:-out}
mkdir -p "$OUT"

up_args=(--json --engine "$ENGINE")
[ -n "$CANDIDATES" ] && up_args+=(--candidates "$CANDIDATES")
urls=$("$EVALSVC" local up "${up_args[@]}")
baseline=$(printf '%s' "$urls" | python3 -c 'import json,sys; print(json.load(sys.stdin)["baseline"])')
mapfile -t candidates < <(printf '%s' "$urls" | python3 -c 'import json,sys; [print(u) for u in json.load(sys.stdin)["candidates"].values()]')
servers=$(printf '%s' "$urls" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(", ".join(["baseline", *d["candidates"]]))')

# The store (the embedded SQLite database unless EVALSVC_DATABASE_URL says otherwise) at the
# schema of the evalsvc installed now: a demo re-run after an upgrade would otherwise stop at
# "run `evalsvc db upgrade`". Idempotent, and quick when there is nothing to do.
"$EVALSVC" db upgrade >&2

rm -f "$OUT/report.json"   # the next steps name this run's id, never a previous one's
set +e
"$EVALSVC" compare "$baseline" "${candidates[@]}" --suite "$SUITE" \
  --json "$OUT/report.json" --junit "$OUT/junit.xml" --markdown "$OUT/report.md"
code=$?
set -e
# The terms of the table and the lines under it, one line (docs/statistics.md has them in full).
echo "terms: p (NI) = non-inferiority p (< α 0.05: no worse than the margin) · MDE = smallest drop n items can show · cut at budget = answer stopped at max_tokens" >&2
echo "reports: $OUT/report.json $OUT/junit.xml $OUT/report.md (compare exit status $code)" >&2
if [ -s "$OUT/report.json" ]; then
  run_id=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_id"])' "$OUT/report.json")
  cat >&2 <<NEXT

Next steps
  See this run in the dashboard (each side's answers, the items that flipped, the findings):
    $EVALSVC tokens create viewer-${run_id:0:8} --scope read   # prints a token once: paste it at the login page
    $EVALSVC api serve                                # then open http://127.0.0.1:8080/runs/$run_id
  Stop the local servers ($servers are still running):
    make down
  A decision-sized run (needle, reasoning, determinism and speed at sizes meant to decide; minutes):
    make demo SUITE=smoke$([ "$ENGINE" = llamacpp ] || printf ' ENGINE=%s' "$ENGINE")
NEXT
fi
case $code in
  0|1|3) exit 0 ;;   # a verdict was reached: the demo worked, whatever the verdict
  *) exit "$code" ;;
esac
