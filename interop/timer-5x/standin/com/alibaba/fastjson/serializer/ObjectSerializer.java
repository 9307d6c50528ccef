package com.alibaba.fastjson.serializer;

import java.io.IOException;
import java.lang.reflect.Type;

/** Stand-in for fastjson's ObjectSerializer (compile-time only). */
public interface ObjectSerializer {
    void write(JSONSerializer serializer, Object object, Object fieldName, Type fieldType, int features) throws IOException;
}
