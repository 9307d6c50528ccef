#!/bin/bash
# Usage: interop/incident/run.sh BROKER_BUILD SAMPLE WORK [PORT_BASE]
#   BROKER_BUILD: a built copy of the real-broker scripts (4.9.4 `broker/` or 5.3.3 `broker5/`, README there),
#                 whose driver prints the body (interop/incident/README.md: one sed line)
#   SAMPLE:       broker-e2e (4.9.4) or broker5-e2e (5.3.3)
#   WORK:         a new directory: the copies of the store, every command's output, the checks' JSON
# From the repository's root, rmqdelay on PATH. Runs, each on its own copy of the sample's store, with the broker
# stopped while rmqdelay writes:
#   reset-offset:   consumers reset --group GID_ORDERS --topic TopicOrders --to-offset 10
#   reset-datetime: consumers reset --group GID_ORDERS --topic TopicOrders --to-datetime (store time of queue 0's unit 12)
#   resend:         dlq resend --group GID_FAIL; then, after the broker ran, a second resend without --again and
#                   one more restart (the consumer must get nothing)
# each: dry run (--json), --execute, start.sh, client.sh consume, stop.sh, compare.py. Every server binds 127.0.0.1.
set -euo pipefail
B=$(cd "$1" && pwd); SAMPLE=$2; mkdir -p "$3"; WORK=$(cd "$3" && pwd); P=${4:-31876}
HERE=$(dirname "$(readlink -f "$0")")
NS=127.0.0.1:$P
CONSUME_SECONDS=${CONSUME_SECONDS:-75}   # > the client's 30 s heartbeat: see README (subscription not latest)
CHECKS=${CHECKS:-reset-offset reset-datetime resend}
PY=${PYTHON:-python3}   # a Python that imports rmqdelay
log() { local c="$*"; c=${c//"$B"/\$BROKER}; c=${c//"$WORK"/\$WORK}; printf '%s\n' "$c" | tee -a "$WORK/commands.log" >&2; }
run() { log "\$ $*"; "$@"; }

[ -d "$WORK/pristine" ] || run rmqdelay samples unpack "$SAMPLE" "$WORK/pristine"
conf() { sed -n "s/^$1=//p" "$WORK/pristine/broker.conf" 2>/dev/null; }
export BROKER_CL_SIZE=$(conf mappedFileSizeCommitLog) BROKER_CQ_SIZE=$(conf mappedFileSizeConsumeQueue)
[ -n "$BROKER_CL_SIZE" ] || export BROKER_CL_SIZE=1048576 BROKER_CQ_SIZE=6000
copy() { rm -rf "$WORK/$1" "$WORK/$1.left"; cp -a --sparse=always "$WORK/pristine" "$WORK/$1"; }
left() { cp -a --sparse=always "$WORK/$1" "$WORK/$1.left"; }   # the store as rmqdelay left it, for compare.py
broker_round() {  # STORE NAME TOPIC GROUP: start, consume, stop
  run "$B/start.sh" "$1" "$P" > "$WORK/$2.start.out"
  if [ "$2" = reset-datetime ] && [ -d "$B/build/search" ]; then search_offsets; fi
  log "\$ $B/client.sh consume $NS $3 $4 $CONSUME_SECONDS > $2.consumed.jsonl"
  "$B/client.sh" consume "$NS" "$3" "$4" "$CONSUME_SECONDS" > "$WORK/$2.consumed.jsonl" 2> "$WORK/$2.consume.err" || true
  log "  client: $(grep '^consume' "$WORK/$2.consume.err" || echo 'no summary')"
  run "$B/stop.sh" "$1" > "$WORK/$2.stop.out"
}
trap 'for d in "$WORK"/*/; do [ -f "$d/broker.pid" ] || [ -f "$d/namesrv.pid" ] && "$B/stop.sh" "$d" >/dev/null 2>&1; done; true' EXIT

search_offsets() {  # what the running broker's searchOffset (resetOffsetByTime's lookup) answers, beside rmqdelay
  local ts; ts=$(rmqdelay inspect commitlog "$WORK/pristine" --topic TopicOrders --json | "$PY" -c '
import json, sys
ts = sorted({json.loads(l)["storeTimestamp"] for l in sys.stdin})
print(*[ts[0] - 1000, ts[2], ts[2] + 1, ts[len(ts) // 2], ts[len(ts) // 2] + 1, ts[-3], ts[-1], ts[-1] + 1000])')
  . "$B/common.sh"
  log "\$ java SearchOffset $NS broker-a TopicOrders 4 $ts > search-offset.jsonl"
  "$JAVA" "${JVM_COMMON[@]}" -Drocketmq.client.logUseSlf4j=true -Dlogback.configurationFile="$B/home/conf/logback_client.xml" \
    -cp "$B/build/search:$CP" SearchOffset "$NS" broker-a TopicOrders 4 $ts > "$WORK/search-offset.jsonl" 2> "$WORK/search-offset.err" || true
}

reset_check() {  # NAME TARGET...
  local name=$1; shift; local s="$WORK/$name"
  copy "$name"
  run rmqdelay consumers reset "$s" --group GID_ORDERS --topic TopicOrders "$@" --json > "$WORK/$name.dry.jsonl"
  run rmqdelay consumers reset "$s" --group GID_ORDERS --topic TopicOrders "$@" --execute --json > "$WORK/$name.execute.jsonl"
  left "$name"
  broker_round "$s" "$name" TopicOrders GID_ORDERS
  "$PY" "$HERE/compare.py" reset "$WORK/$name.left" "$WORK/$name.dry.jsonl" "$WORK/$name.consumed.jsonl" \
    > "$WORK/$name.check.json" && log "  $name: match" || log "  $name: DOES NOT MATCH ($WORK/$name.check.json)"
}

want() { [[ " $CHECKS " == *" $1 "* ]]; }
if want reset-offset; then reset_check reset-offset --to-offset 10; fi
if want reset-datetime; then
T=$(rmqdelay inspect cq "$WORK/pristine" --topic TopicOrders --queue 0 --offset 12 --limit 1 --json \
    | "$PY" -c 'import json,sys; print(json.loads(sys.stdin.readline())["commitLogOffset"])')
T=$(rmqdelay inspect message "$WORK/pristine" "$T" --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["storeTimestamp"])')
reset_check reset-datetime --to-datetime "$T"
fi
want resend || exit 0

name=resend; s="$WORK/$name"; copy "$name"
run rmqdelay dlq resend "$s" --group GID_FAIL --json > "$WORK/$name.dry.jsonl"
run rmqdelay dlq resend "$s" --group GID_FAIL --execute --json > "$WORK/$name.execute.jsonl"
left "$name"
broker_round "$s" "$name" TopicFail GID_FAIL
"$PY" "$HERE/compare.py" resend "$WORK/$name.left" "$WORK/$name.dry.jsonl" "$WORK/$name.consumed.jsonl" \
  "$(dirname "$HERE")/../samples/$SAMPLE/consumed.fail.jsonl.gz" > "$WORK/$name.check.json" \
  && log "  $name: match" || log "  $name: DOES NOT MATCH ($WORK/$name.check.json)"
run rmqdelay dlq resend "$s" --group GID_FAIL --json > "$WORK/$name.second-dry.jsonl"
run rmqdelay dlq resend "$s" --group GID_FAIL --execute --json > "$WORK/$name.second-execute.jsonl"
broker_round "$s" "$name-second" TopicFail GID_FAIL
log "  second resend: $("$PY" -c 'import json,sys; r=[json.loads(l) for l in open(sys.argv[1])]; print(sum(x["resend"] for x in r), "put back of", len(r))' "$WORK/$name.second-execute.jsonl"), consumer then received $(wc -l < "$WORK/$name-second.consumed.jsonl")"
