package io.openmessaging.storage.dledger;

/** Stand-in: never constructed (enableDLegerCommitLog=false). */
public class DLedgerConfig {
    public String getDataStorePath() {
        throw new UnsupportedOperationException("DLedger is not part of this harness");
    }
}
