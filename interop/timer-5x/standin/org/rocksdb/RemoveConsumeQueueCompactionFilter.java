package org.rocksdb;

/**
 * Stand-in for the filter of RocketMQ's own rocksdbjni build (not in the stock jar). Used only
 * by the RocksDB consume queue store (storeType=defaultRocksDB), not by these file stores.
 */
public class RemoveConsumeQueueCompactionFilter extends AbstractCompactionFilter<Slice> {
    public RemoveConsumeQueueCompactionFilter(final long minPhyOffset) {
        super(0L);
        throw new UnsupportedOperationException("RocksDB consume queue is not part of this harness");
    }
}
