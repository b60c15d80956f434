#!/usr/bin/env bash
# Runs every fuzz target (fuzz/fuzz_targets/*.rs) for N seconds each, one at a time on one
# core, and prints the executions per target and the total.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default: 240 s, every target)
#
# FUZZ_SANITIZER=address adds AddressSanitizer (cargo-fuzz's default). The default here is
# `none`: the SDK forbids unsafe code, so ASan only watches dependencies, at a 5-6x cost in
# executions; debug assertions (integer overflow included) stay on either way.
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly compiler; without a nightly
# toolchain it builds with the stable one and RUSTC_BOOTSTRAP=1. Seeds each corpus from the
# recorded provider fixtures under tests/fixtures and providers.toml; corpora, crash artifacts
# and logs stay under fuzz/ (git-ignored). Exits non-zero when a target crashed: the input is
# in fuzz/artifacts/TARGET/ (replay it with `cargo fuzz run TARGET FILE`).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

secs=${1:-240}
san=${FUZZ_SANITIZER:-none}
shift || true
all_targets=(ratelimit_headers delay_text adapter_responses sse_stream config_toml)
targets=("${@:-${all_targets[@]}}")

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    fuzz=(cargo +nightly fuzz)
else
    export RUSTC_BOOTSTRAP=1
    fuzz=(cargo fuzz)
fi

declare -A dict=(
    [ratelimit_headers]=ratelimit [delay_text]=ratelimit
    [adapter_responses]=json [sse_stream]=json [config_toml]=toml
)
declare -A max_len=(
    [ratelimit_headers]=2048 [delay_text]=512
    [adapter_responses]=8192 [sse_stream]=8192 [config_toml]=8192
)

# seed TARGET NAME PREFIX_PRINTF_ESCAPES [FILE]: PREFIX then FILE's bytes as one seed.
seed() {
    local dir="fuzz/corpus/$1"
    mkdir -p "$dir"
    { printf "$3"; if [ -n "${4:-}" ]; then cat "$4"; fi; } > "$dir/seed-$2"
}

# The status bytes the adapter target maps to 100 + (u16 % 500), little-endian.
status_bytes() {
    local v=$(($1 - 100))
    printf '\\x%02x\\x%02x' $((v & 255)) $((v >> 8))
}

make_seeds() {
    local i=0 p f name status op
    for p in openai azure anthropic gemini deepgram; do
        for f in tests/fixtures/$p/*; do
            name=$(basename "$f")
            case "$name" in
                *.sse|stream_ok.txt)
                    seed sse_stream "$p-$name" "\\x$(printf %02x $i)\\x07\\xff" "$f"
                    continue ;;
            esac
            case "$name" in
                *429*|*rate_limit*|*quota*) status=429 ;;
                *overloaded*) status=503 ;;
                *not_found*) status=404 ;;
                *invalid_api_key*|*invalid_auth*) status=401 ;;
                *api_key_invalid*|*corrupt*|*error*|*blocked*) status=400 ;;
                *server*) status=500 ;;
                *) status=200 ;;
            esac
            op=0
            case "$name" in transcription*|listen*) op=1 ;; esac
            local ct='\x00'
            [[ "$name" == *.txt ]] && ct='\x02'
            seed adapter_responses "$p-$name" \
                "\\x$(printf %02x $i)\\x00\\x$(printf %02x $op)$(status_bytes $status)$ct\\x00" "$f"
        done
        i=$((i + 1))
    done
    seed config_toml providers.toml '' providers.toml
    for f in tests/fixtures/config/*.toml; do
        seed config_toml "$(basename "$f")" '' "$f"
    done
    # ratelimit_headers: a dialect byte, then (name index, length, value) records; the
    # indexes are those of fuzz_support::HEADER_NAMES.
    seed ratelimit_headers openai '\x00\x01\x06150000\x03\x06149984\x05\x046m0s\x00\x03500\x02\x03499\x04\x0412ms'
    seed ratelimit_headers azure '\x02\x03\x05 9000\x09\x0260\x20\x041500\x1f\x012'
    seed ratelimit_headers anthropic '\x03\x0b\x0250\x0c\x0249\x0d\x142024-06-01T12:00:30Z\x0e\x0510000'
    seed ratelimit_headers generic '\x04\x17\x0d100;window=60\x18\x0299\x19\x0a1717243230'
    seed ratelimit_headers ietf '\x04\x1b\x1a"burst";q=100;w=60,"d";q=1\x1a\x11"burst";r=50;t=30'
    seed ratelimit_headers retry-date '\x00\x1f\x1dSat, 01 Jun 2024 12:00:30 GMT\x21\x04true'
    local s
    for s in '6m0s' '23h18m29.144s' '1.5' 'Please try again in 1.2s.' \
        'Please retry after 9 seconds.' 'Sat, 01 Jun 2024 12:00:30 GMT'; do
        seed delay_text "$(printf %s "$s" | tr -c 'A-Za-z0-9.' _)" "$s"
    done
}

make_seeds
"${fuzz[@]}" build -s "$san"

mkdir -p fuzz/logs
total=0
crashed=()
printf '%-20s %15s %10s %8s\n' target executions exec/s crashes
for t in "${targets[@]}"; do
    log="fuzz/logs/$t.log"
    set +e
    "${fuzz[@]}" run -s "$san" "$t" "fuzz/corpus/$t" -- \
        -max_total_time="$secs" -dict="fuzz/dicts/${dict[$t]}.dict" \
        -max_len="${max_len[$t]}" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    if [ -z "$execs" ]; then
        execs=$(grep -o '^#[0-9]*' "$log" | tr -d '#' | tail -1)
    fi
    execs=${execs:-0}
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    n_crash=$(find "fuzz/artifacts/$t" -type f 2>/dev/null | wc -l)
    printf '%-20s %15s %10s %8s\n' "$t" "$execs" "${rate:-?}" "$n_crash"
    total=$((total + execs))
    if [ "$rc" -ne 0 ]; then
        crashed+=("$t")
    fi
done
printf '%-20s %15s\n' total "$total"
if [ "${#crashed[@]}" -gt 0 ]; then
    echo "crashed: ${crashed[*]} (inputs in $root/fuzz/artifacts/, logs in $root/fuzz/logs/)" >&2
    exit 1
fi
