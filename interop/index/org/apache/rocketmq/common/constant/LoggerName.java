package org.apache.rocketmq.common.constant;
public class LoggerName { public static final String STORE_LOGGER_NAME = "store"; }
