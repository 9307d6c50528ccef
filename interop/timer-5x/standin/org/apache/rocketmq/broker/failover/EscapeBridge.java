package org.apache.rocketmq.broker.failover;

import java.util.concurrent.CompletableFuture;
import org.apache.rocketmq.broker.BrokerController;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.store.PutMessageResult;

/** Stand-in for EscapeBridge: its master branch (peekMasterBroker() != null), the only one a master takes. */
public class EscapeBridge {
    private final BrokerController brokerController;

    public EscapeBridge(BrokerController brokerController) {
        this.brokerController = brokerController;
    }

    public PutMessageResult putMessage(MessageExtBrokerInner messageExt) {
        return brokerController.peekMasterBroker().getMessageStore().putMessage(messageExt);
    }

    public CompletableFuture<PutMessageResult> asyncPutMessage(MessageExtBrokerInner messageExt) {
        return brokerController.peekMasterBroker().getMessageStore().asyncPutMessage(messageExt);
    }
}
