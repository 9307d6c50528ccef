#!/bin/sh
# sh run.sh BUILD_OUT STORE REPORT.json [Harness options...]   (BUILD_OUT as given to build.sh)
# RMQ_HARNESS_LOG=FILE keeps the store's log (INFO and above); RMQ_FAKETIME="@2026-11-23 16:12:20"
# starts the JVM's wall clock there (libfaketime, Debian package libfaketime).
set -eu
OUT=$1; shift
if [ -n "${RMQ_FAKETIME:-}" ]; then
  export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 FAKETIME="$RMQ_FAKETIME" \
    FAKETIME_DONT_FAKE_MONOTONIC=1
fi
exec java -Xmx1500m -Drmq.harness.log="${RMQ_HARNESS_LOG:-/dev/null}" \
  --add-opens java.base/java.nio=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
  --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
  --add-exports java.base/sun.nio.ch=ALL-UNNAMED \
  -cp "$OUT/classes:$(cat "$OUT/classpath")" Harness "$@"
