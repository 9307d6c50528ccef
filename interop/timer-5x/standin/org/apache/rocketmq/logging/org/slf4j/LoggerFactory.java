package org.apache.rocketmq.logging.org.slf4j;

import java.io.FileOutputStream;
import java.io.PrintStream;
import java.lang.reflect.Proxy;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.slf4j.helpers.FormattingTuple;
import org.slf4j.helpers.MessageFormatter;

/**
 * Stand-in for the shaded slf4j bridge: INFO and above go to the file named by the system
 * property rmq.harness.log (stdout without it); WARN and ERROR are also kept in {@link #PROBLEMS}
 * for the harness report. TRACE/DEBUG are off, as in the broker's default logback config.
 */
public final class LoggerFactory {
    public static final List<String> PROBLEMS = Collections.synchronizedList(new ArrayList<>());
    private static final PrintStream OUT = open();

    private static PrintStream open() {
        String path = System.getProperty("rmq.harness.log");
        if (path == null) {
            return System.out;
        }
        try {
            return new PrintStream(new FileOutputStream(path, true), true, "UTF-8");
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    private LoggerFactory() {
    }

    public static Logger getLogger(Class<?> clazz) {
        return getLogger(clazz.getName());
    }

    public static Logger getLogger(String name) {
        return (Logger) Proxy.newProxyInstance(Logger.class.getClassLoader(), new Class<?>[] {Logger.class},
            (proxy, method, args) -> {
                String m = method.getName();
                switch (m) {
                    case "getName":
                        return name;
                    case "isTraceEnabled":
                    case "isDebugEnabled":
                        return false;
                    case "isInfoEnabled":
                    case "isWarnEnabled":
                    case "isErrorEnabled":
                        return true;
                    case "trace":
                    case "debug":
                        return null;
                    case "info":
                    case "warn":
                    case "error":
                        log(name, m.toUpperCase(), args);
                        return null;
                    case "hashCode":
                        return System.identityHashCode(proxy);
                    case "equals":
                        return proxy == args[0];
                    case "toString":
                        return "Logger[" + name + "]";
                    default:
                        if (method.getReturnType() == boolean.class) {
                            return false;
                        }
                        return null;
                }
            });
    }

    private static void log(String name, String level, Object[] args) {
        if (args == null || args.length == 0) {
            return;
        }
        int i = 0;
        if (args[0] != null && !(args[0] instanceof String)) {
            i = 1; // a Marker
        }
        String fmt = String.valueOf(args[i]);
        Object[] rest;
        if (args.length - i - 1 == 1 && args[i + 1] instanceof Object[]) {
            rest = (Object[]) args[i + 1];
        } else {
            rest = new Object[args.length - i - 1];
            System.arraycopy(args, i + 1, rest, 0, rest.length);
        }
        FormattingTuple t = MessageFormatter.arrayFormat(fmt, rest);
        Throwable th = t.getThrowable();
        if (th == null && rest.length > 0 && rest[rest.length - 1] instanceof Throwable) {
            th = (Throwable) rest[rest.length - 1];
        }
        String line = System.currentTimeMillis() + " " + level + " [" + Thread.currentThread().getName() + "] "
            + name + " - " + t.getMessage() + (th == null ? "" : " :: " + th);
        OUT.println(line);
        if (th != null) {
            th.printStackTrace(OUT);
        }
        if (!"INFO".equals(level)) {
            PROBLEMS.add(line);
        }
    }
}
