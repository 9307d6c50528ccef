import java.io.*; import java.nio.charset.StandardCharsets; import java.util.*;
import org.apache.rocketmq.store.*; import org.apache.rocketmq.store.index.*;
/** Feeds dispatch requests (one TSV line each: offset, storeTimestamp, sysFlag, topic, keys|\N, uniqKey|\N;
 *  fields hex-encoded UTF-8) to the real IndexService, then flushes its files. Args: root slots entries tsv [query...] */
public class Harness {
    static String hex(String h) { if (h.equals("\\N")) return null; byte[] b = new byte[h.length()/2];
        for (int i = 0; i < b.length; i++) b[i] = (byte) Integer.parseInt(h.substring(2*i, 2*i+2), 16);
        return new String(b, StandardCharsets.UTF_8); }
    public static void main(String[] a) throws Exception {
        DefaultMessageStore store = new DefaultMessageStore();
        store.config.root = a[0]; store.config.maxHashSlotNum = Integer.parseInt(a[1]); store.config.maxIndexNum = Integer.parseInt(a[2]);
        IndexService svc = new IndexService(store); svc.load(true);
        BufferedReader r = new BufferedReader(new InputStreamReader(new FileInputStream(a[3]), StandardCharsets.UTF_8));
        String line;
        while ((line = r.readLine()) != null) {
            String[] f = line.split("\t", -1);
            DispatchRequest d = new DispatchRequest();
            d.commitLogOffset = Long.parseLong(f[0]); d.storeTimestamp = Long.parseLong(f[1]); d.sysFlag = Integer.parseInt(f[2]);
            d.topic = hex(f[3]); d.keys = hex(f[4]); d.uniqKey = hex(f[5]);
            svc.buildIndex(d);
            Thread.sleep(0, 1000);
        }
        if (a.length > 5) {  // queries: topic, key, maxNum, begin, end (hex UTF-8 strings) -> one line of offsets each
            BufferedReader qr = new BufferedReader(new InputStreamReader(new FileInputStream(a[4]), StandardCharsets.UTF_8));
            PrintWriter out = new PrintWriter(new OutputStreamWriter(new FileOutputStream(a[5]), StandardCharsets.UTF_8));
            while ((line = qr.readLine()) != null) {
                String[] f = line.split("\t", -1);
                QueryOffsetResult q = svc.queryOffset(hex(f[0]), hex(f[1]), Integer.parseInt(f[2]), Long.parseLong(f[3]), Long.parseLong(f[4]));
                out.println(q.getPhyOffsets() + "\t" + q.getIndexLastUpdateTimestamp() + "\t" + q.getIndexLastUpdatePhyoffset());
            }
            out.close();
        }

        Thread.sleep(300);
        System.out.println("indexMsgTimestamp " + store.cp.index);
    }
}
