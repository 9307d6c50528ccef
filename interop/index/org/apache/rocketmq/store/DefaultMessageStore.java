package org.apache.rocketmq.store;
import org.apache.rocketmq.store.config.MessageStoreConfig;
public class DefaultMessageStore {
    public MessageStoreConfig config = new MessageStoreConfig(); public StoreCheckpoint cp = new StoreCheckpoint();
    public MessageStoreConfig getMessageStoreConfig() { return config; } public StoreCheckpoint getStoreCheckpoint() { return cp; }
    public RunningFlags getAccessRights() { return new RunningFlags(); }
}
