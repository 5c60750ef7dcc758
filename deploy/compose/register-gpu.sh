#!/bin/sh
# One-shot service `nightly` of docker-compose.yml (profile gpu): register the two vLLM
# services under names and add the nightly schedule that compares them. Safe to re-run: endpoint
# registration is an upsert, and an existing schedule of that name is kept (with its history).
set -eu
evalsvc endpoints add --replace gpu-bf16 "http://vllm-bf16:8000/v1"
evalsvc endpoints add --replace gpu-fp8-kv "http://vllm-fp8-kv:8000/v1"
if evalsvc schedules list --json | grep -q '"nightly-fp8-kv"'; then
  echo "schedule nightly-fp8-kv already exists"
else
  evalsvc schedules add nightly-fp8-kv --cron "${NIGHTLY_CRON:-0 3 * * *}" \
    --baseline gpu-bf16 --candidate gpu-fp8-kv --suite "${NIGHTLY_SUITE:-release}" \
    --label team=serving --label source=compose
fi
evalsvc schedules list
