package org.apache.commons.collections;

import java.util.Collection;

/** Stand-in for commons-collections 3 CollectionUtils (the two methods used). */
public final class CollectionUtils {
    private CollectionUtils() {
    }

    public static boolean isEmpty(Collection<?> c) {
        return c == null || c.isEmpty();
    }

    public static boolean isNotEmpty(Collection<?> c) {
        return !isEmpty(c);
    }
}
