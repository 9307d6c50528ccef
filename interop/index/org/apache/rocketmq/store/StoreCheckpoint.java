package org.apache.rocketmq.store;
public class StoreCheckpoint { public long index; public long getIndexMsgTimestamp() { return index; }
  public void setIndexMsgTimestamp(long t) { index = t; } public void flush() {} }
