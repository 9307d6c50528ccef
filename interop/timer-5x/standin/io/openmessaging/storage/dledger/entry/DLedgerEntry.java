package io.openmessaging.storage.dledger.entry;

/** Stand-in: only the constant DefaultMessageStore reads when the commit log is a DLedger one. */
public class DLedgerEntry {
    public static final int POS_OFFSET = 4 + 4 + 8 + 8;
    public static final int HEADER_SIZE = POS_OFFSET + 8 + 4 + 4 + 4;
    public static final int BODY_OFFSET = HEADER_SIZE + 4;
}
