package org.apache.rocketmq.broker;

import org.apache.rocketmq.broker.failover.EscapeBridge;
import org.apache.rocketmq.broker.out.BrokerOuterAPI;
import org.apache.rocketmq.broker.schedule.ScheduleMessageService;
import org.apache.rocketmq.broker.topic.TopicConfigManager;
import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.store.MessageStore;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import org.apache.rocketmq.store.timer.TimerMessageStore;

/**
 * Stand-in for the broker's BrokerController: only what ScheduleMessageService, HookUtils and
 * EscapeBridge ask of it, for a master broker (peekMasterBroker is this broker). The harness
 * builds the real store, timer store and schedule service and hands them in.
 */
public class BrokerController {
    private final BrokerConfig brokerConfig;
    private final MessageStoreConfig messageStoreConfig;
    private final BrokerStatsManager brokerStatsManager;
    private final EscapeBridge escapeBridge = new EscapeBridge(this);
    private final TopicConfigManager topicConfigManager = new TopicConfigManager();
    private final BrokerOuterAPI brokerOuterAPI = new BrokerOuterAPI();
    private MessageStore messageStore;
    private TimerMessageStore timerMessageStore;
    private ScheduleMessageService scheduleMessageService;

    public BrokerController(BrokerConfig brokerConfig, MessageStoreConfig messageStoreConfig,
        BrokerStatsManager brokerStatsManager) {
        this.brokerConfig = brokerConfig;
        this.messageStoreConfig = messageStoreConfig;
        this.brokerStatsManager = brokerStatsManager;
    }

    public BrokerConfig getBrokerConfig() {
        return brokerConfig;
    }

    public MessageStoreConfig getMessageStoreConfig() {
        return messageStoreConfig;
    }

    public BrokerStatsManager getBrokerStatsManager() {
        return brokerStatsManager;
    }

    public EscapeBridge getEscapeBridge() {
        return escapeBridge;
    }

    public TopicConfigManager getTopicConfigManager() {
        return topicConfigManager;
    }

    public BrokerOuterAPI getBrokerOuterAPI() {
        return brokerOuterAPI;
    }

    public MessageStore getMessageStore() {
        return messageStore;
    }

    public void setMessageStore(MessageStore messageStore) {
        this.messageStore = messageStore;
    }

    public TimerMessageStore getTimerMessageStore() {
        return timerMessageStore;
    }

    public void setTimerMessageStore(TimerMessageStore timerMessageStore) {
        this.timerMessageStore = timerMessageStore;
    }

    public ScheduleMessageService getScheduleMessageService() {
        return scheduleMessageService;
    }

    public void setScheduleMessageService(ScheduleMessageService scheduleMessageService) {
        this.scheduleMessageService = scheduleMessageService;
    }

    public BrokerController peekMasterBroker() {
        return this;
    }
}
