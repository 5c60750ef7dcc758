#!/usr/bin/env bash
# The main job on the embedded default: bring up the real local endpoints (the baseline and the
# candidates asked for; llama.cpp's F16 and q8_0-KV-cache pair unless ENGINE=vllm), then gate every
# candidate against the baseline with `evalsvc compare`.
# Exit status is compare's: 0 pass, 1 fail, 3 inconclusive (all three are a successful demo),
# 2 usage error, 4 infrastructure error.
set -euo pipefail
EVALSVC=${EVALSVC:-evalsvc}
ENGINE=${ENGINE:-llamacpp}   # llamacpp (any AVX2 CPU, ready in seconds) or vllm (vLLM-CPU)
# empty: the engine's default candidate (llamacpp: q8_0-kv; vllm: fp8-kv, or w8a8 where this CPU
# cannot serve fp8-kv)
CANDIDATES=${CANDIDATES:-}
SUITE=${SUITE:-demo}
OUT=${OUT:-out}
mkdir -p "$OUT"

up_args=(--json --engine "$ENGINE")
[ -n "$CANDIDATES" ] && up_args+=(--candidates "$CANDIDATES")
urls=$("$EVALSVC" local up "${up_args[@]}")
baseline=$(printf '%s' "$urls" | python3 -c 'import json,sys; print(json.load(sys.stdin)["baseline"])')
mapfile -t candidates < <(printf '%s' "$urls" | python3 -c 'import json,sys; [print(u) for u in json.load(sys.stdin)["candidates"].values()]')

# The store (the embedded SQLite database unless EVALSVC_DATABASE_URL says otherwise) at the
# schema of the evalsvc installed now: a demo re-run after an upgrade would otherwise stop at
# "run `evalsvc db upgrade`". Idempotent, and quick when there is nothing to do.
"$EVALSVC" db upgrade >&2

set +e
"$EVALSVC" compare "$baseline" "${candidates[@]}" --suite "$SUITE" \
  --json "$OUT/report.json" --junit "$OUT/junit.xml" --markdown "$OUT/report.md"
code=$?
set -e
echo "reports: $OUT/report.json $OUT/junit.xml $OUT/report.md (compare exit status $code)" >&2
case $code in
  0|1|3) exit 0 ;;   # a verdict was reached: the demo worked, whatever the verdict
  *) exit "$code" ;;
esac
