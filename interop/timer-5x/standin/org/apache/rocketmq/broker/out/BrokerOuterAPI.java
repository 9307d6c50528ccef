package org.apache.rocketmq.broker.out;

import org.apache.rocketmq.common.message.MessageExt;

/** Stand-in: no remote brokers here (HookUtils.sendMessageBack is for slave acting master). */
public class BrokerOuterAPI {
    public Object sendMessageToSpecificBroker(String brokerAddr, String brokerName, MessageExt msg, String group,
        long timeoutMillis) {
        throw new UnsupportedOperationException("no remote broker in this harness");
    }
}
