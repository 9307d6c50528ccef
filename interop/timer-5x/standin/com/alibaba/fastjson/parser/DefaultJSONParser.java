package com.alibaba.fastjson.parser;

/** Stand-in for fastjson's DefaultJSONParser (compile-time only). */
public class DefaultJSONParser {
    public <T> T parseObject(Class<T> clazz) {
        throw new UnsupportedOperationException();
    }
}
