package org.apache.rocketmq.logging;
public class InternalLoggerFactory { public static InternalLogger getLogger(String n) { return new InternalLogger(); } }
