import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.File;
import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.broker.schedule.ScheduleMessageService;
import org.apache.rocketmq.broker.util.HookUtils;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.logging.org.slf4j.LoggerFactory;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.hook.PutMessageHook;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import org.apache.rocketmq.store.timer.Slot;
import org.apache.rocketmq.store.timer.TimerCheckpoint;
import org.apache.rocketmq.store.timer.TimerMessageStore;
import org.apache.rocketmq.store.timer.TimerMetrics;

/**
 * Opens a store directory with the real RocketMQ 5.3.3 DefaultMessageStore, TimerMessageStore
 * and ScheduleMessageService as a master broker does (BrokerController.initializeMessageStore,
 * recoverAndInitService, start, changeScheduleServiceStatus(true)), lets them deliver everything
 * that can become due, shuts down in the broker's order and writes a JSON report: what the real
 * code put, the commit log max offset before/after, every file it changed (bytes zeroed,
 * overwritten, written; removed, shortened), and every WARN/ERROR it logged.
 *
 * java -cp CLASSES:JARS Harness STORE REPORT.json [--conf broker.properties]
 *     [--schedule-levels "1s 1s ..."|store] [--no-fast-forward] [--max-seconds N] [--settle-ms N]
 *
 * Fast-forward: whenever everything is idle, the timer's write clock is moved (through a
 * subclass hook on TimerMessageStore.maybeMoveWriteTime) to the next occupied wheel slot + one
 * precision, so the real dequeue walks the wheel slot by slot. The schedule service runs with an
 * all-1s level table by default: its own correctDeliverTimestamp then delivers every parked
 * message at once (the store itself keeps the configured table for the tagsCode of new units).
 */
public class Harness {
    static volatile long virtualMs = 0;

    /** The real TimerMessageStore; only its write clock can be moved ahead of the wall clock. */
    static class FastTimer extends TimerMessageStore {
        FastTimer(DefaultMessageStore store, MessageStoreConfig cfg, TimerCheckpoint cp, TimerMetrics m,
            BrokerStatsManager bsm) throws java.io.IOException {
            super(store, cfg, cp, m, bsm);
        }

        @Override
        protected void maybeMoveWriteTime() {
            super.maybeMoveWriteTime();
            long v = virtualMs;
            if (currWriteTimeMs < v) {
                currWriteTimeMs = v;
            }
        }

        long readMs() {
            return currReadTimeMs;
        }

        long writeMs() {
            return currWriteTimeMs;
        }

        long queueOffset() {
            return currQueueOffset;
        }

        int inFlight() {
            return enqueuePutQueue.size() + dequeueGetQueue.size() + dequeuePutQueue.size();
        }
    }

    static final int BLANK_MAGIC = -875286124; // CommitLog.BLANK_MAGIC_CODE

    public static void main(String[] args) throws Exception {
        String storeDir = new File(args[0]).getAbsolutePath();
        String reportPath = args[1];
        String conf = null;
        String scheduleLevels = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s";
        boolean fastForward = true;
        long maxSeconds = 900;
        long settleMs = 3000;
        for (int i = 2; i < args.length; i++) {
            switch (args[i]) {
                case "--conf": conf = args[++i]; break;
                case "--schedule-levels": scheduleLevels = args[++i]; break;
                case "--no-fast-forward": fastForward = false; break;
                case "--max-seconds": maxSeconds = Long.parseLong(args[++i]); break;
                case "--settle-ms": settleMs = Long.parseLong(args[++i]); break;
                default: throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        Map<String, Object> report = new LinkedHashMap<>();
        report.put("store", storeDir);

        BrokerConfig brokerConfig = new BrokerConfig();
        MessageStoreConfig msc = new MessageStoreConfig();
        if (conf != null) {
            Properties p = new Properties();
            try (InputStream in = new FileInputStream(conf)) {
                p.load(in);
            }
            MixAll.properties2Object(p, brokerConfig);
            MixAll.properties2Object(p, msc);
            report.put("conf", new TreeMap<>(p));
        }
        msc.setStorePathRootDir(storeDir);
        msc.setStorePathCommitLog(storeDir + File.separator + "commitlog");
        String storeLevels = msc.getMessageDelayLevel();

        // ---- before
        Map<String, byte[]> before = snapshot(Paths.get(storeDir));
        List<Map<String, Object>> oldRecords = new ArrayList<>();
        long endBefore = scanCommitLog(before, 0, oldRecords, false);
        report.put("commitLogEndBeforeByScan", endBefore);
        report.put("timercheckBefore", timercheck(before.get("config/timercheck")));

        // ---- build as BrokerController.initializeMessageStore does
        BrokerStatsManager bsm = new BrokerStatsManager(brokerConfig.getBrokerClusterName(), brokerConfig.isEnableDetailStat());
        BrokerController bc = new BrokerController(brokerConfig, msc, bsm);
        DefaultMessageStore store = new DefaultMessageStore(msc, bsm, null, brokerConfig, new ConcurrentHashMap<>());
        bc.setMessageStore(store);
        ScheduleMessageService sms = new ScheduleMessageService(bc);
        bc.setScheduleMessageService(sms);
        FastTimer timer = null;
        if (msc.isTimerWheelEnable()) {
            String cfgDir = storeDir + File.separator + "config" + File.separator;
            TimerCheckpoint cp = new TimerCheckpoint(cfgDir + "timercheck");
            TimerMetrics metrics = new TimerMetrics(cfgDir + "timermetrics");
            timer = new FastTimer(store, msc, cp, metrics, bsm);
            timer.registerEscapeBridgeHook(msg -> bc.getEscapeBridge().putMessage(msg));
            store.setTimerMessageStore(timer);
            bc.setTimerMessageStore(timer);
        }
        registerMessageStoreHook(bc, store);

        // ---- load (recover) as BrokerController.recoverAndInitService does
        boolean loaded = store.load();
        report.put("messageStoreLoad", loaded);
        long maxPhyAfterLoad = store.getMaxPhyOffset();
        report.put("commitLogMaxOffsetAfterLoad", maxPhyAfterLoad);
        if (timer != null) {
            boolean t = timer.load();
            report.put("timerLoad", t);
            loaded = loaded && t;
        }
        if (!"store".equals(scheduleLevels)) {
            msc.setMessageDelayLevel(scheduleLevels);
        }
        boolean s = sms.load();
        report.put("scheduleLoad", s);
        report.put("scheduleLevels", msc.getMessageDelayLevel());
        report.put("storeLevels", storeLevels);
        report.put("delayOffsetsLoaded", new TreeMap<>(sms.getOffsetTable()));
        loaded = loaded && s;

        long t0 = System.currentTimeMillis();
        int steps = 0;
        List<Map<String, Object>> stepLog = new ArrayList<>();
        boolean timedOut = false;
        if (loaded) {
            // ---- start as BrokerController.start: store, timer, then changeScheduleServiceStatus(true)
            report.put("startWallMs", System.currentTimeMillis()); // the (possibly faked) clock at start
            store.start();
            if (timer != null) {
                timer.start();
            }
            sms.start();
            if (timer != null) {
                timer.syncLastReadTimeMs();
                timer.setShouldRunningDequeue(true);
            }
            if (timer != null) {
                report.put("timerStartReadMs", timer.readMs());
            }
            int idleChecks = 0;
            long lastMove = System.currentTimeMillis();
            while (true) {
                Thread.sleep(50);
                if (System.currentTimeMillis() - t0 > maxSeconds * 1000) {
                    timedOut = true;
                    break;
                }
                if (!idle(store, sms, timer)) {
                    idleChecks = 0;
                    continue;
                }
                if (++idleChecks < 3) {
                    continue;
                }
                long next = (timer != null && fastForward) ? nextOccupiedSlot(timer) : -1;
                if (next >= 0) {
                    virtualMs = next + timer.getPrecisionMs();
                    steps++;
                    if (stepLog.size() < 5000) {
                        Map<String, Object> st = new LinkedHashMap<>();
                        st.put("slotMs", next);
                        st.put("readMs", timer.readMs());
                        stepLog.add(st);
                    }
                    idleChecks = 0;
                    lastMove = System.currentTimeMillis();
                    continue;
                }
                if (System.currentTimeMillis() - lastMove >= settleMs) {
                    break;
                }
            }
            if (timer != null) {
                report.put("timerEndReadMs", timer.readMs());
                report.put("timerEndWriteMs", timer.writeMs());
                report.put("timerEndQueueOffset", timer.queueOffset());
            }
            report.put("delayOffsetsAtEnd", new TreeMap<>(sms.getOffsetTable()));
            report.put("commitLogMaxOffsetAtEnd", store.getMaxPhyOffset());
        }
        report.put("runMs", System.currentTimeMillis() - t0);
        report.put("clockSteps", steps);
        report.put("timedOut", timedOut);

        // ---- shutdown in BrokerController.shutdown's order
        if (timer != null) {
            timer.shutdown();
        }
        store.shutdown();
        sms.persist();
        sms.shutdown();

        // ---- after
        Map<String, byte[]> after = snapshot(Paths.get(storeDir));
        List<Map<String, Object>> newRecords = new ArrayList<>();
        long endAfter = scanCommitLog(after, endBefore, newRecords, true);
        report.put("commitLogEndAfterByScan", endAfter);
        report.put("timercheckAfter", timercheck(after.get("config/timercheck")));

        // duplicates: a (topic, UNIQ_KEY, reconsumeTimes) put now that an earlier record of a real topic
        // already has (retry attempts of one message share the UNIQ_KEY, not reconsumeTimes)
        Set<String> seen = new HashSet<>();
        for (Map<String, Object> r : oldRecords) {
            String topic = (String) r.get("topic");
            if (!isSystem(topic) && r.get("uniqKey") != null) {
                seen.add(topic + "\u0000" + r.get("uniqKey") + "\u0000" + r.get("reconsumeTimes"));
            }
        }
        Map<String, Integer> byTopic = new TreeMap<>();
        Map<String, Integer> byKind = new TreeMap<>();
        List<Map<String, Object>> dups = new ArrayList<>();
        for (Map<String, Object> r : newRecords) {
            String topic = (String) r.get("topic");
            byTopic.merge(topic, 1, Integer::sum);
            byKind.merge((String) r.get("kind"), 1, Integer::sum);
            if (!isSystem(topic) && r.get("uniqKey") != null && !seen.add(topic + "\u0000" + r.get("uniqKey") + "\u0000" + r.get("reconsumeTimes"))) {
                dups.add(r);
            }
        }
        Map<String, Object> summary = new LinkedHashMap<>();
        summary.put("loaded", loaded);
        summary.put("recordsPut", newRecords.size());
        summary.put("byKind", byKind);
        summary.put("byTopic", byTopic);
        summary.put("duplicatesOfEarlierRecords", dups.size());
        Map<String, Object> files = diffFiles(before, after);
        summary.put("dataFilesDamaged", files.remove("damaged"));
        summary.put("problemsLogged", LoggerFactory.PROBLEMS.size());
        report.put("summary", summary);
        report.put("files", files);
        report.put("problems", new ArrayList<>(LoggerFactory.PROBLEMS));
        report.put("duplicates", dups);
        report.put("clockStepLog", stepLog);
        report.put("put", newRecords);
        new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT).writeValue(new File(reportPath), report);
        System.out.println(new ObjectMapper().writeValueAsString(summary));
        System.exit(0);
    }

    static boolean isSystem(String topic) {
        return TopicValidator.RMQ_SYS_SCHEDULE_TOPIC.equals(topic) || TimerMessageStore.TIMER_TOPIC.equals(topic);
    }

    /** The three put hooks of BrokerController.registerMessageStoreHook, and its send-back hook. */
    static void registerMessageStoreHook(BrokerController bc, DefaultMessageStore store) {
        store.getPutMessageHookList().add(new PutMessageHook() {
            public String hookName() {
                return "checkBeforePutMessage";
            }

            public PutMessageResult executeBeforePutMessage(MessageExt msg) {
                return HookUtils.checkBeforePutMessage(bc, msg);
            }
        });
        store.getPutMessageHookList().add(new PutMessageHook() {
            public String hookName() {
                return "innerBatchChecker";
            }

            public PutMessageResult executeBeforePutMessage(MessageExt msg) {
                return msg instanceof MessageExtBrokerInner ? HookUtils.checkInnerBatch(bc, msg) : null;
            }
        });
        store.getPutMessageHookList().add(new PutMessageHook() {
            public String hookName() {
                return "handleScheduleMessage";
            }

            public PutMessageResult executeBeforePutMessage(MessageExt msg) {
                return msg instanceof MessageExtBrokerInner
                    ? HookUtils.handleScheduleMessage(bc, (MessageExtBrokerInner) msg) : null;
            }
        });
        store.setSendMessageBackHook((msgList, brokerName, brokerAddr) ->
            HookUtils.sendMessageBack(bc, msgList, brokerName, brokerAddr));
    }

    static boolean idle(DefaultMessageStore store, ScheduleMessageService sms, FastTimer timer) {
        if (store.dispatchBehindBytes() != 0) {
            return false;
        }
        for (Map.Entry<Integer, Long> e : sms.getOffsetTable().entrySet()) {
            ConsumeQueueInterface cq = store.getConsumeQueue(TopicValidator.RMQ_SYS_SCHEDULE_TOPIC, e.getKey() - 1);
            if (cq != null && e.getValue() < cq.getMaxOffsetInQueue()) {
                return false;
            }
        }
        if (timer != null) {
            ConsumeQueueInterface cq = store.getConsumeQueue(TimerMessageStore.TIMER_TOPIC, 0);
            if (cq != null && timer.queueOffset() < cq.getMaxOffsetInQueue()) {
                return false;
            }
            if (timer.inFlight() != 0 || timer.readMs() < timer.writeMs()) {
                return false;
            }
        }
        return true;
    }

    /** The first slot at or after the read position whose stored time matches (getSlot != -1), within one wheel. */
    static long nextOccupiedSlot(FastTimer timer) {
        int precision = timer.getPrecisionMs();
        long from = timer.readMs();
        long slots = 2L * 7 * 24 * 3600 * 1000 / precision; // TimerMessageStore: TIMER_WHEEL_TTL_DAY * DAY_SECS * 2
        for (long i = 0; i < slots; i++) {
            long t = from + i * precision;
            Slot slot = timer.getTimerWheel().getSlot(t);
            if (slot.timeMs != -1) {
                return t;
            }
        }
        return -1;
    }

    static Map<String, byte[]> snapshot(Path root) throws Exception {
        Map<String, byte[]> m = new TreeMap<>();
        try (Stream<Path> w = Files.walk(root)) {
            for (Path p : (Iterable<Path>) w::iterator) {
                if (Files.isRegularFile(p)) {
                    String rel = root.relativize(p).toString().replace(File.separatorChar, '/');
                    if (!rel.equals("lock")) {
                        m.put(rel, Files.readAllBytes(p));
                    }
                }
            }
        }
        return m;
    }

    static Map<String, Object> timercheck(byte[] b) {
        if (b == null || b.length < 56) {
            return null;
        }
        ByteBuffer bb = ByteBuffer.wrap(b);
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("lastReadTimeMs", bb.getLong());
        m.put("lastTimerLogFlushPos", bb.getLong());
        m.put("lastTimerQueueOffset", bb.getLong());
        m.put("masterTimerQueueOffset", bb.getLong());
        m.put("stateVersion", bb.getLong());
        m.put("timestamp", bb.getLong());
        m.put("counter", bb.getLong());
        return m;
    }

    /** Walks the commit log files from offset `from` with the real MessageDecoder; returns the end of the data. */
    static long scanCommitLog(Map<String, byte[]> files, long from, List<Map<String, Object>> out, boolean full) {
        TreeMap<Long, byte[]> logs = new TreeMap<>();
        for (Map.Entry<String, byte[]> e : files.entrySet()) {
            if (e.getKey().startsWith("commitlog/") && e.getKey().matches("commitlog/\\d{20}")) {
                logs.put(Long.parseLong(e.getKey().substring(10)), e.getValue());
            }
        }
        long end = from;
        for (Map.Entry<Long, byte[]> f : logs.entrySet()) {
            long base = f.getKey();
            byte[] data = f.getValue();
            if (base + data.length <= from) {
                continue;
            }
            int pos = (int) Math.max(0, from - base);
            boolean last = false;
            while (pos + 8 <= data.length) {
                ByteBuffer bb = ByteBuffer.wrap(data, pos, data.length - pos);
                int size = bb.getInt();
                int magic = bb.getInt();
                if (magic == BLANK_MAGIC) {
                    break;
                }
                if (size <= 0) {
                    last = true;
                    break;
                }
                ByteBuffer rec = ByteBuffer.wrap(data, pos, size).slice();
                MessageExt m = MessageDecoder.decode(rec, true, false, false, true, false);
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("phyOffset", base + pos);
                r.put("size", size);
                if (m == null) {
                    r.put("undecodable", true);
                } else {
                    r.put("topic", m.getTopic());
                    r.put("queueId", m.getQueueId());
                    r.put("queueOffset", m.getQueueOffset());
                    r.put("uniqKey", m.getProperties() == null ? null : m.getProperties().get(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
                    r.put("kind", kind(m));
                    r.put("reconsumeTimes", m.getReconsumeTimes());
                    if (full) {
                        r.put("magic", String.format("0x%08X", magic));
                        r.put("sysFlag", m.getSysFlag());
                        r.put("flag", m.getFlag());
                        r.put("bornTimestamp", m.getBornTimestamp());
                        r.put("storeTimestamp", m.getStoreTimestamp());
                        r.put("bornHost", String.valueOf(m.getBornHost()));
                        r.put("storeHost", String.valueOf(m.getStoreHost()));
                        r.put("bodyCRC", m.getBodyCRC());
                        Map<String, String> props = new TreeMap<>(m.getProperties());
                        r.put("propertiesRaw", props.remove("propertiesString"));
                        r.put("properties", props);
                    }
                }
                out.add(r);
                pos += size;
                end = base + pos;
            }
            if (last) {
                break;
            }
        }
        return end;
    }

    static String kind(MessageExt m) {
        String topic = m.getTopic();
        Map<String, String> p = m.getProperties();
        if (TimerMessageStore.TIMER_TOPIC.equals(topic)) {
            return p.containsKey("TIMER_ROLL_TIMES") ? "timer-roll" : "timer-parked";
        }
        if (TopicValidator.RMQ_SYS_SCHEDULE_TOPIC.equals(topic)) {
            return "delay-parked";
        }
        if (p.containsKey("TIMER_DEQUEUE_MS")) {
            return String.valueOf(Long.MAX_VALUE).equals(p.get("TIMER_ENQUEUE_MS")) ? "timer-delivered-never-enqueued" : "timer-delivered";
        }
        if (p.containsKey(MessageConst.PROPERTY_DELAY_TIME_LEVEL) && p.containsKey(MessageConst.PROPERTY_REAL_TOPIC)) {
            return "delay-delivered";
        }
        return "other";
    }

    static boolean isDataFile(String rel) {
        return rel.startsWith("commitlog/") || rel.startsWith("consumequeue/") || rel.startsWith("timerlog/")
            || rel.startsWith("index/");
    }

    /** Per file: added, removed, or changed with counts of bytes zeroed / overwritten / written. */
    static Map<String, Object> diffFiles(Map<String, byte[]> before, Map<String, byte[]> after) {
        Map<String, Object> res = new LinkedHashMap<>();
        List<String> damaged = new ArrayList<>();
        Set<String> names = new TreeSet<>(before.keySet());
        names.addAll(after.keySet());
        Map<String, Object> changed = new TreeMap<>();
        List<String> unchanged = new ArrayList<>();
        for (String n : names) {
            byte[] a = before.get(n);
            byte[] b = after.get(n);
            Map<String, Object> d = new LinkedHashMap<>();
            if (a == null) {
                d.put("status", "added");
                d.put("sizeAfter", b.length);
            } else if (b == null) {
                d.put("status", "removed");
                d.put("sizeBefore", a.length);
                if (isDataFile(n)) {
                    damaged.add(n + " removed");
                }
            } else if (java.util.Arrays.equals(a, b)) {
                unchanged.add(n);
                continue;
            } else {
                int zeroed = 0;
                int overwritten = 0;
                int written = 0;
                long firstDiff = -1;
                long firstLoss = -1;
                int common = Math.min(a.length, b.length);
                for (int i = 0; i < common; i++) {
                    if (a[i] != b[i]) {
                        if (firstDiff < 0) {
                            firstDiff = i;
                        }
                        if (a[i] == 0) {
                            written++;
                        } else {
                            if (firstLoss < 0) {
                                firstLoss = i;
                            }
                            if (b[i] == 0) {
                                zeroed++;
                            } else {
                                overwritten++;
                            }
                        }
                    }
                }
                d.put("status", "changed");
                d.put("sizeBefore", a.length);
                d.put("sizeAfter", b.length);
                d.put("firstDiff", firstDiff);
                d.put("bytesWritten", written);
                d.put("bytesZeroed", zeroed);
                d.put("bytesOverwritten", overwritten);
                d.put("firstNonZeroByteChanged", firstLoss);
                if (b.length < a.length) {
                    d.put("shortened", true);
                }
                if (a.length < 65536 && !isDataFile(n) && !n.equals("timerwheel") && !n.equals("checkpoint")
                    && !n.equals("config/timercheck")) {
                    d.put("textBefore", new String(a, java.nio.charset.StandardCharsets.UTF_8));
                    d.put("textAfter", new String(b, java.nio.charset.StandardCharsets.UTF_8));
                }
                // index files update hash slots and their header in place: only a shorter one is damage
                boolean inPlace = n.startsWith("index/");
                if (isDataFile(n) && (b.length < a.length || (!inPlace && (zeroed > 0 || overwritten > 0)))) {
                    damaged.add(n + " zeroed=" + zeroed + " overwritten=" + overwritten + " size " + a.length + "->" + b.length
                        + " first=" + firstLoss);
                }
            }
            changed.put(n, d);
        }
        res.put("changed", changed);
        res.put("unchangedCount", unchanged.size());
        res.put("damaged", damaged);
        return res;
    }
}
