package org.apache.rocketmq.common.message;
public class MessageConst { public static final String KEY_SEPARATOR = " "; }
