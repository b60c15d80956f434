#!/usr/bin/env bash
# Crash and resume: the `llm-failover` command's batch killed with SIGKILL at random moments,
# then rerun to completion. Checks that no completed item was lost or re-sent (its line is byte-identical
# after every later run) and that the final output holds exactly one line per input id.
#
#   scripts/crash_resume.sh [KILLS=6] [SEED=1] [ITEMS=600]
#
# Runs against the in-process emulator (the `demo` environment): loopback only, no keys. The
# input is the bundled prompts repeated under fresh ids up to ITEMS lines, so that every kill
# lands while items are in flight (each run starts a fresh emulator whose buckets are full).
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-6}
seed=${2:-1}
items=${3:-600}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out="$work/results.jsonl"
input="$work/input.jsonl"
python3 - examples/prompts.jsonl "$input" "$items" <<'PY'
import json, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = [l for l in open(src) if l.strip()]
with open(dst, 'w') as f:
    for i in range(n):
        raw = lines[i % len(lines)]
        try:
            item = json.loads(raw)
            item['id'] = f"{item.get('id', 'x')}-{i}"
            f.write(json.dumps(item) + '\n')
        except ValueError:
            f.write(raw if raw.endswith('\n') else raw + '\n')  # keep the bad lines bad
PY

cargo build --release -p llm-failover-cli >/dev/null 2>&1 || cargo build --release -p llm-failover-cli
bin=${CARGO_TARGET_DIR:-target}/release/llm-failover

# Snapshot of every ok line seen so far, by id: later runs must keep these lines unchanged.
snapshot() {
  python3 - "$out" "$work/ok.json" <<'PY'
import json, sys
out, snap = sys.argv[1], sys.argv[2]
try:
    seen = json.load(open(snap))
except FileNotFoundError:
    seen = {}
lost = changed = 0
lines = {}
try:
    data = open(out, 'rb').read().decode('utf-8', 'replace')
except FileNotFoundError:
    data = ''
for raw in data.split('\n'):
    try:
        item = json.loads(raw)
    except ValueError:
        continue  # a torn last line from the kill
    lines[item['id']] = raw
for id_, raw in seen.items():
    if id_ not in lines:
        lost += 1
    elif lines[id_] != raw:
        changed += 1
for id_, raw in lines.items():
    if json.loads(raw).get('ok') and id_ not in seen:
        seen[id_] = raw
json.dump(seen, open(snap, 'w'))
print(f"{len(seen)} ok so far, {lost} lost, {changed} re-sent")
sys.exit(1 if lost or changed else 0)
PY
}

RANDOM=$seed
for i in $(seq 1 "$kills"); do
  delay_ms=$(( 300 + RANDOM % 1700 ))
  "$bin" --input "$input" --output "$out" >/dev/null 2>"$work/run$i.err" &
  pid=$!
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  printf 'kill %d after %4d ms: ' "$i" "$delay_ms"
  snapshot
done

"$bin" --input "$input" --output "$out" >/dev/null 2>"$work/final.err"
printf 'final run: '
snapshot
python3 - "$out" "$input" <<'PY'
import json, sys
out, inp = sys.argv[1], sys.argv[2]
ids = [json.loads(l)['id'] for l in open(out) if l.strip()]
n_input = sum(1 for l in open(inp) if l.strip())
dupes = len(ids) - len(set(ids))
print(f"output: {len(ids)} lines, {len(set(ids))} distinct ids, {dupes} twice; input: {n_input} lines")
sys.exit(1 if dupes or len(ids) != n_input else 0)
PY
echo "crash and resume: OK"
