package org.apache.rocketmq.broker.topic;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import org.apache.rocketmq.common.TopicConfig;

/** Stand-in: HookUtils only looks topics up for inner-batch messages (none in these stores). */
public class TopicConfigManager {
    private final ConcurrentMap<String, TopicConfig> topicConfigTable = new ConcurrentHashMap<>();

    public ConcurrentMap<String, TopicConfig> getTopicConfigTable() {
        return topicConfigTable;
    }
}
