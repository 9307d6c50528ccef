package org.apache.rocketmq.store;
public class RunningFlags { public void makeIndexFileError() { System.err.println("index error"); } }
