package org.apache.rocketmq.common;
import java.text.SimpleDateFormat;
import java.util.Date;
/** Stand-in: the one method IndexService uses (a file name from the local time). */
public class UtilAll {
    public static String timeMillisToHumanString(final long t) {
        return new SimpleDateFormat("yyyyMMddHHmmssSSS").format(new Date(t));
    }
}
