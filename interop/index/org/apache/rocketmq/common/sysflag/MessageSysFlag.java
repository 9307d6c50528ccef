package org.apache.rocketmq.common.sysflag;
public class MessageSysFlag {
    public final static int TRANSACTION_NOT_TYPE = 0;
    public final static int TRANSACTION_PREPARED_TYPE = 0x1 << 2;
    public final static int TRANSACTION_COMMIT_TYPE = 0x2 << 2;
    public final static int TRANSACTION_ROLLBACK_TYPE = 0x3 << 2;
    public static int getTransactionValue(final int flag) { return flag & TRANSACTION_ROLLBACK_TYPE; }
}
