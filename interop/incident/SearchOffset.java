import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * What the running broker answers to searchOffset (the lookup under mqadmin resetOffsetByTime):
 *   java SearchOffset NAMESRV BROKER_NAME TOPIC QUEUES TIMESTAMP_MS...
 * stdout: one JSON object per queue and timestamp {"queueId", "timestamp", "offset"}.
 * Compile against the real-broker build's jars (interop/incident/README.md).
 */
public class SearchOffset {
    public static void main(String[] a) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(a[0]);
        admin.setInstanceName("search-offset-" + System.nanoTime());
        admin.start();
        try {
            int queues = Integer.parseInt(a[3]);
            for (int i = 4; i < a.length; i++) {
                long t = Long.parseLong(a[i]);
                for (int q = 0; q < queues; q++) {
                    long offset = admin.searchOffset(new MessageQueue(a[2], a[1], q), t);
                    System.out.println("{\"queueId\":" + q + ",\"timestamp\":" + t + ",\"offset\":" + offset + "}");
                }
            }
        } finally {
            admin.shutdown();
        }
    }
}
