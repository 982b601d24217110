#!/bin/bash
set -e
log=/app/logs/service.log
fatal=$(awk '$2 == "level=FATAL" { sub(/^req=/, "", $4); print $4 }' "$log")
slow=$(awk '$3 == "svc=payments" { l = $5; sub(/^latency_ms=/, "", l); if (l + 0 > max) { max = l + 0; r = $4 } }
            END { sub(/^req=/, "", r); print r }' "$log")
errors=$(awk '{ s = $3; sub(/^svc=/, "", s); seen[s] = 1 }
              $2 == "level=ERROR" { n[s]++ }
              END { for (s in seen) printf "%s\t%d\n", s, n[s] + 0 }' "$log" \
         | jq -R 'split("\t") | {(.[0]): (.[1] | tonumber)}' | jq -s 'add')
jq -n --arg f "$fatal" --arg s "$slow" --argjson e "$errors" \
  '{fatal_request: $f, slowest_payments_request: $s, errors_by_service: $e}' > /app/triage.json
