package com.alibaba.fastjson.serializer;

/** Stand-in for fastjson's SerializeWriter (compile-time only). */
public class SerializeWriter {
    public void writeByteArray(byte[] bytes) {
        throw new UnsupportedOperationException();
    }
}
