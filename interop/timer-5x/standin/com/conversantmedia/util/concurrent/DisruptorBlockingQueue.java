package com.conversantmedia.util.concurrent;

import java.util.concurrent.ArrayBlockingQueue;

/** Stand-in: only built when timerEnableDisruptor=true (default false). */
public class DisruptorBlockingQueue<E> extends ArrayBlockingQueue<E> {
    public DisruptorBlockingQueue(int capacity) {
        super(capacity);
    }
}
