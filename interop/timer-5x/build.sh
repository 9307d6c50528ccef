#!/bin/sh
# Build the timer harness: the real RocketMQ 5.3.3 store, common and remoting modules (and from
# broker: ScheduleMessageService, DelayOffsetSerializeWrapper, HookUtils, BrokerMetricsConstant),
# taken from the tag at build time, plus the stand-ins in standin/ and Harness.java.
#   sh build.sh [OUT]            (default OUT=/tmp/timer-harness; classes in OUT/classes)
# Environment: RMQ_REPO (git repo with tag rocketmq-all-5.3.3), SPARK_JARS (a pyspark jars/ dir),
# M2_REPO (a Maven local repository holding opentelemetry 1.66.0 and jna 5.17.0).
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${RMQ_REPO:-/work/.mirror/apache+rocketmq/repo}
TAG=rocketmq-all-5.3.3
JARS=${SPARK_JARS:-/work/main/.venv/lib/python3.11/site-packages/pyspark/jars}
M2=${M2_REPO:-/root/.m2/repository}
OUT=${1:-/tmp/timer-harness}
rm -rf "$OUT" && mkdir -p "$OUT/tag" "$OUT/src" "$OUT/classes"
B=broker/src/main/java/org/apache/rocketmq/broker
git -C "$REPO" archive "$TAG" store/src/main/java common/src/main/java remoting/src/main/java \
  $B/schedule $B/util/HookUtils.java $B/metrics/BrokerMetricsConstant.java | tar -x -C "$OUT/tag"
for m in store common remoting broker; do cp -r "$OUT/tag/$m/src/main/java/." "$OUT/src/"; done
R="$OUT/src/org/apache/rocketmq"
# Left out: nothing on the harness's path uses them, and they need libraries not here
# (grpc, org.reflections, fastjson internals, the shaded logback, netty's haproxy codec).
rm "$R/common/constant/GrpcConstants.java" "$R/remoting/protocol/RequestHeaderRegistry.java" \
   "$R/common/utils/FastJsonSerializer.java" "$R/common/fastjson/GenericMapSuperclassDeserializer.java" \
   "$R/common/logging/JoranConfiguratorExt.java" "$R/common/logging/DefaultJoranConfiguratorExt.java" \
   "$R/remoting/netty/NettyRemotingServer.java"
# Replaced by a stand-in (needs the dledger library): store/dledger/DLedgerCommitLog.java
cp -r "$HERE/standin/." "$OUT/src/"
cp "$HERE/Harness.java" "$OUT/src/"
CP=""
for j in "$JARS"/netty-*.jar "$JARS"/commons-lang3-*.jar "$JARS"/guava-*.jar "$JARS"/failureaccess-*.jar \
         "$JARS"/commons-io-*.jar "$JARS"/commons-codec-*.jar "$JARS"/commons-collections4-*.jar \
         "$JARS"/slf4j-api-*.jar "$JARS"/lz4-java-*.jar "$JARS"/zstd-jni-*.jar "$JARS"/rocksdbjni-*.jar \
         "$JARS"/gson-*.jar "$JARS"/jackson-core-*.jar "$JARS"/jackson-databind-*.jar \
         "$JARS"/jackson-annotations-*.jar "$JARS"/jsr305-*.jar \
         "$M2"/io/opentelemetry/opentelemetry-api/1.66.0/*.jar "$M2"/io/opentelemetry/opentelemetry-context/1.66.0/*.jar \
         "$M2"/io/opentelemetry/opentelemetry-common/1.66.0/*.jar "$M2"/io/opentelemetry/opentelemetry-sdk-common/1.66.0/*.jar \
         "$M2"/io/opentelemetry/opentelemetry-sdk-metrics/1.66.0/*.jar "$M2"/net/java/dev/jna/jna/5.17.0/*.jar; do
  [ -f "$j" ] && CP="$CP:$j"
done
echo "${CP#:}" > "$OUT/classpath"
find "$OUT/src" -name '*.java' > "$OUT/sources"
javac -nowarn -encoding UTF-8 -Xmaxerrs 2000 -proc:none -J-Xmx1500m \
  --add-exports java.base/sun.nio.ch=ALL-UNNAMED --add-exports java.base/jdk.internal.ref=ALL-UNNAMED \
  -cp "${CP#:}" -d "$OUT/classes" @"$OUT/sources"
echo "built $OUT/classes ($(grep -c . "$OUT/sources") sources)"
