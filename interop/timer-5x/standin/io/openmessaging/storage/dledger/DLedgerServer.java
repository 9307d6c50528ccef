package io.openmessaging.storage.dledger;

/** Stand-in: never constructed (enableDLegerCommitLog=false). */
public class DLedgerServer {
    public DLedgerConfig getdLedgerConfig() {
        throw new UnsupportedOperationException("DLedger is not part of this harness");
    }
}
