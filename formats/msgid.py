"""Socket addresses as the store holds them, and the offset message id built from them."""

import ipaddress

from .errors import FormatError


def format_host(address: bytes, port: int) -> str:
    """As Java prints an InetSocketAddress's host: IPv6 in full groups, no '::'."""
    if len(address) == 4:
        return f"{'.'.join(str(b) for b in address)}:{port}"
    groups = ":".join(f"{int.from_bytes(address[i:i + 2], 'big'):x}" for i in range(0, 16, 2))
    return f"[{groups}]:{port}"


def parse_host(text: str) -> tuple[bytes, int]:
    """'ip:port' or '[ipv6]:port' to (address bytes, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"not a host:port address: {text!r}")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return ipaddress.ip_address(host).packed, int(port)


def create_message_id(store_address: bytes, store_port: int, commit_log_offset: int) -> str:
    """MessageDecoder.createMessageId: address + port (4) + physical offset (8), upper hex."""
    return (
        store_address + store_port.to_bytes(4, "big") + commit_log_offset.to_bytes(8, "big", signed=True)
    ).hex().upper()


def decode_message_id(msg_id: str) -> tuple[bytes, int, int]:
    """MessageDecoder.decodeMessageId: (store address, port, commit log offset)."""
    if len(msg_id) not in (32, 56):
        raise FormatError(0, "an offset message id of 32 (IPv4) or 56 (IPv6) hex digits")
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raise FormatError(0, "an offset message id of hex digits") from None
    address_len = len(raw) - 12
    return (
        raw[:address_len],
        int.from_bytes(raw[address_len:address_len + 4], "big"),
        int.from_bytes(raw[address_len + 4:], "big", signed=True),
    )
