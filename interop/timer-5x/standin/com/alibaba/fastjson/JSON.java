package com.alibaba.fastjson;

import com.alibaba.fastjson.annotation.JSONField;
import com.alibaba.fastjson.serializer.SerializerFeature;
import com.fasterxml.jackson.core.json.JsonReadFeature;
import com.fasterxml.jackson.core.json.JsonWriteFeature;
import com.fasterxml.jackson.core.util.DefaultIndenter;
import com.fasterxml.jackson.core.util.DefaultPrettyPrinter;
import com.fasterxml.jackson.core.util.Separators;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.MapperFeature;
import com.fasterxml.jackson.databind.PropertyName;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.introspect.Annotated;
import com.fasterxml.jackson.databind.introspect.AnnotatedMember;
import com.fasterxml.jackson.databind.introspect.JacksonAnnotationIntrospector;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.Writer;
import java.lang.reflect.Type;
import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * Stand-in for fastjson's JSON facade, over Jackson: bean properties (getters/setters and public
 * fields) in alphabetical order as fastjson writes them; reads fastjson's own output including
 * its unquoted integer map keys. Differences from fastjson 1.2.83 that show in files: map keys
 * are always quoted, and the pretty format is Jackson's with tab indentation.
 */
public abstract class JSON {
    private static final JsonMapper MAPPER = JsonMapper.builder()
        .enable(JsonReadFeature.ALLOW_UNQUOTED_FIELD_NAMES, JsonReadFeature.ALLOW_SINGLE_QUOTES)
        .disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
        .disable(SerializationFeature.FAIL_ON_EMPTY_BEANS)
        .enable(MapperFeature.SORT_PROPERTIES_ALPHABETICALLY)
        .annotationIntrospector(new JacksonAnnotationIntrospector() {
            @Override
            public boolean hasIgnoreMarker(AnnotatedMember m) {
                JSONField f = m.getAnnotation(JSONField.class);
                return (f != null && !f.serialize()) || super.hasIgnoreMarker(m);
            }

            @Override
            public PropertyName findNameForSerialization(Annotated a) {
                JSONField f = a.getAnnotation(JSONField.class);
                return f != null && !f.name().isEmpty() ? PropertyName.construct(f.name()) : super.findNameForSerialization(a);
            }

            @Override
            public PropertyName findNameForDeserialization(Annotated a) {
                JSONField f = a.getAnnotation(JSONField.class);
                return f != null && !f.name().isEmpty() ? PropertyName.construct(f.name()) : super.findNameForDeserialization(a);
            }
        })
        .build();

    private static final DefaultPrettyPrinter PRETTY = new DefaultPrettyPrinter(
        Separators.createDefaultInstance().withObjectFieldValueSpacing(Separators.Spacing.NONE))
        .withObjectIndenter(new DefaultIndenter("\t", "\n"))
        .withArrayIndenter(new DefaultIndenter("\t", "\n"));

    public static String toJSONString(Object object) {
        return toJSONString(object, false);
    }

    public static String toJSONString(Object object, boolean prettyFormat) {
        try {
            return prettyFormat ? MAPPER.writer(PRETTY).writeValueAsString(object) : MAPPER.writeValueAsString(object);
        } catch (Exception e) {
            throw new JSONException("toJSONString: " + e, e);
        }
    }

    public static String toJSONString(Object object, SerializerFeature... features) {
        boolean pretty = false;
        boolean ascii = false;
        for (SerializerFeature f : features) {
            pretty |= f == SerializerFeature.PrettyFormat;
            ascii |= f == SerializerFeature.BrowserCompatible;
        }
        try {
            com.fasterxml.jackson.databind.ObjectWriter w = pretty ? MAPPER.writer(PRETTY) : MAPPER.writer();
            if (ascii) {
                w = w.with(JsonWriteFeature.ESCAPE_NON_ASCII);
            }
            return w.writeValueAsString(object);
        } catch (Exception e) {
            throw new JSONException("toJSONString: " + e, e);
        }
    }

    public static void writeJSONString(Writer writer, Object object, SerializerFeature... features) {
        try {
            writer.write(toJSONString(object, features));
            writer.flush();
        } catch (java.io.IOException e) {
            throw new JSONException("writeJSONString: " + e, e);
        }
    }

    public static <T> T parseObject(String text, Class<T> clazz) {
        if (text == null || text.isEmpty()) {
            return null;
        }
        try {
            return MAPPER.readValue(text, clazz);
        } catch (Exception e) {
            throw new JSONException("parseObject: " + e, e);
        }
    }

    public static <T> T parseObject(byte[] bytes, Class<T> clazz) {
        return bytes == null ? null : parseObject(new String(bytes, StandardCharsets.UTF_8), clazz);
    }

    @SuppressWarnings("unchecked")
    public static <T> T parseObject(String text, Type type) {
        if (text == null || text.isEmpty()) {
            return null;
        }
        try {
            JavaType jt = MAPPER.getTypeFactory().constructType(type);
            return (T) MAPPER.readValue(text, jt);
        } catch (Exception e) {
            throw new JSONException("parseObject: " + e, e);
        }
    }

    public static <T> T parseObject(String text, TypeReference<T> type) {
        return parseObject(text, type.getType());
    }

    public static <T> List<T> parseArray(String text, Class<T> clazz) {
        if (text == null || text.isEmpty()) {
            return null;
        }
        try {
            return MAPPER.readValue(text, MAPPER.getTypeFactory().constructCollectionType(List.class, clazz));
        } catch (Exception e) {
            throw new JSONException("parseArray: " + e, e);
        }
    }
}
