package org.apache.rocketmq.logging;
public class InternalLogger {
    public void info(String s, Object... a) {} public void warn(String s, Object... a) {}
    public void error(String s, Object... a) { System.err.println("ERROR " + s); }
}
