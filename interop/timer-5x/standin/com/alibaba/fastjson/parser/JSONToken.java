package com.alibaba.fastjson.parser;

/** Stand-in for fastjson's JSONToken (the constant RocketMQ uses). */
public class JSONToken {
    public static final int LITERAL_STRING = 4;
}
