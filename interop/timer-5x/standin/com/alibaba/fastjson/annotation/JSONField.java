package com.alibaba.fastjson.annotation;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/** Stand-in for fastjson's JSONField (the attributes RocketMQ uses). */
@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.METHOD, ElementType.FIELD, ElementType.PARAMETER})
public @interface JSONField {
    String name() default "";

    String[] alternateNames() default {};

    boolean serialize() default true;

    boolean deserialize() default true;

    Class<?> serializeUsing() default Void.class;

    Class<?> deserializeUsing() default Void.class;
}
