package org.apache.rocketmq.store;
public class DispatchRequest {
    public String topic, keys, uniqKey; public long commitLogOffset, storeTimestamp; public int sysFlag;
    public String getTopic() { return topic; } public String getKeys() { return keys; } public String getUniqKey() { return uniqKey; }
    public long getCommitLogOffset() { return commitLogOffset; } public long getStoreTimestamp() { return storeTimestamp; }
    public int getSysFlag() { return sysFlag; }
}
