package org.apache.rocketmq.store.config;
import java.io.File;
public class StorePathConfigHelper { public static String getStorePathIndex(String root) { return root + File.separator + "index"; } }
