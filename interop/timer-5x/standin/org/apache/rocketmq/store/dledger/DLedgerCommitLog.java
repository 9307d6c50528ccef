package org.apache.rocketmq.store.dledger;

import io.openmessaging.storage.dledger.DLedgerServer;
import org.apache.rocketmq.store.CommitLog;
import org.apache.rocketmq.store.DefaultMessageStore;

/** Stand-in for the DLedger commit log (needs the dledger library); refused if configured. */
public class DLedgerCommitLog extends CommitLog {
    public DLedgerCommitLog(final DefaultMessageStore defaultMessageStore) {
        super(defaultMessageStore);
        throw new UnsupportedOperationException("enableDLegerCommitLog is not supported by this harness");
    }

    public DLedgerServer getdLedgerServer() {
        throw new UnsupportedOperationException();
    }
}
