package org.apache.rocketmq.store.config;
public class MessageStoreConfig {
    public int maxHashSlotNum, maxIndexNum; public String root;
    public int getMaxHashSlotNum() { return maxHashSlotNum; } public int getMaxIndexNum() { return maxIndexNum; }
    public String getStorePathRootDir() { return root; } public int getMaxMsgsNumBatch() { return 64; }
}
