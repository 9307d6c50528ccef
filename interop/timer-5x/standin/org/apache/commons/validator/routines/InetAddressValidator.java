package org.apache.commons.validator.routines;

import java.util.regex.Pattern;

/** Stand-in for commons-validator's InetAddressValidator (dotted quads; IPv6 by the JDK's literal parser). */
public class InetAddressValidator {
    private static final InetAddressValidator INSTANCE = new InetAddressValidator();
    private static final Pattern V4 = Pattern.compile("^(\\d{1,3})\\.(\\d{1,3})\\.(\\d{1,3})\\.(\\d{1,3})$");

    public static InetAddressValidator getInstance() {
        return INSTANCE;
    }

    public boolean isValid(String s) {
        return isValidInet4Address(s) || isValidInet6Address(s);
    }

    public boolean isValidInet4Address(String s) {
        if (s == null) {
            return false;
        }
        java.util.regex.Matcher m = V4.matcher(s);
        if (!m.matches()) {
            return false;
        }
        for (int i = 1; i <= 4; i++) {
            String g = m.group(i);
            if (Integer.parseInt(g) > 255 || (g.length() > 1 && g.startsWith("0"))) {
                return false;
            }
        }
        return true;
    }

    public boolean isValidInet6Address(String s) {
        if (s == null || !s.contains(":") || !s.matches("[0-9a-fA-F:.%a-zA-Z]+")) {
            return false;
        }
        try {
            return java.net.InetAddress.getByName(s) instanceof java.net.Inet6Address;
        } catch (Exception e) {
            return false;
        }
    }
}
