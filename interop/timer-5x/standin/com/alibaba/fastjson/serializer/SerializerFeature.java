package com.alibaba.fastjson.serializer;

/** Stand-in for fastjson's SerializerFeature (those RocketMQ names). */
public enum SerializerFeature {
    PrettyFormat, BrowserCompatible, WriteMapNullValue, WriteNullListAsEmpty, SortField, MapSortField,
    WriteEnumUsingToString, DisableCircularReferenceDetect, WriteClassName
}
