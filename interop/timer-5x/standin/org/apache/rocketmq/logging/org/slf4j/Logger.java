package org.apache.rocketmq.logging.org.slf4j;

/** Stand-in for rocketmq-shaded-slf4j-api-bridge: the shaded Logger is the plain slf4j one. */
public interface Logger extends org.slf4j.Logger {
}
