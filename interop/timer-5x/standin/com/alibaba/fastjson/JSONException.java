package com.alibaba.fastjson;

/** Stand-in for fastjson's JSONException. */
public class JSONException extends RuntimeException {
    public JSONException(String message) {
        super(message);
    }

    public JSONException(String message, Throwable cause) {
        super(message, cause);
    }
}
