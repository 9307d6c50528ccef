package com.alibaba.fastjson.serializer;

/** Stand-in for fastjson's JSONSerializer (compile-time only). */
public class JSONSerializer {
    public final SerializeWriter out = new SerializeWriter();
}
