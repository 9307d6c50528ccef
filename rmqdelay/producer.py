"""A message as a producer sends it and the broker's SendMessageProcessor hands it to the store.

Client side (Message + DefaultMQProducerImpl.sendKernelImpl): TAGS, KEYS and WAIT=true are
put by the constructor, then user properties, DELAY (setDelayTimeLevel) and UNIQ_KEY; the
properties travel as the string of that HashMap. Broker side: the string is parsed into a
new map, CLUSTER is added, and the stored string is serialised without WAIT (4.9.4 saves
those 9 bytes); WAIT goes back into the map afterwards, so a delayed message, whose string
putMessage serialises again after adding REAL_TOPIC/REAL_QID, stores WAIT=true.

A 5.x broker (``broker5x``) keeps WAIT in the stored string, parses the request's string into
MessageDecoder's 128-bucket map and writes a separator after every pair.
"""

from __future__ import annotations

from rmqdelay.formats.constants import (
    PROPERTY_CLUSTER,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
)
from rmqdelay.formats.properties import (
    DECODED_MAP_CAPACITY_5X,
    format_properties,
    java_order,
    properties_to_string,
)
from rmqdelay.store.writer import NewMessage

DEFAULT_CLUSTER = "DefaultCluster"


def client_properties(tags: str | None, keys: str | None, user: dict[str, str], delay_level: int,
                      uniq_key: str, timer: tuple[str, str] | None = None) -> dict[str, str]:
    """The producer's property map, in the order its HashMap iterates (what it sends).
    ``timer``: (name, value) of setDeliverTimeMs / setDelayTimeSec / setDelayTimeMs."""
    props: dict[str, str] = {}
    if tags:
        props[PROPERTY_TAGS] = tags
    if keys:
        props[PROPERTY_KEYS] = keys
    props[PROPERTY_WAIT_STORE_MSG_OK] = "true"
    props.update(user)
    if delay_level > 0:
        props[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level)
    if timer is not None:
        props[timer[0]] = timer[1]
    props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX] = uniq_key
    return java_order(props)


def broker_message(topic: str, queue_id: int, body: bytes, client_props: dict[str, str], *,
                   born_timestamp: int, born_host: tuple[bytes, int], store_host: tuple[bytes, int],
                   cluster: str = DEFAULT_CLUSTER, flag: int = 0,
                   store_timestamp: int | None = None, broker5x: bool = False) -> NewMessage:
    """SendMessageProcessor.sendMessage: the MessageExtBrokerInner given to putMessage."""
    props = dict(client_props)  # string2messageProperties keeps the string's order
    props[PROPERTY_CLUSTER] = cluster
    if broker5x:
        raw = properties_to_string(java_order(props, DECODED_MAP_CAPACITY_5X))
        return NewMessage(topic=topic, queueId=queue_id, body=body, properties=props, propertiesRaw=raw,
                          flag=flag, bornTimestamp=born_timestamp, bornHost=born_host, storeHost=store_host,
                          storeTimestamp=store_timestamp)
    wait = props.pop(PROPERTY_WAIT_STORE_MSG_OK, None)
    raw = format_properties(java_order(props))
    if wait is not None:
        props[PROPERTY_WAIT_STORE_MSG_OK] = wait
    return NewMessage(topic=topic, queueId=queue_id, body=body, properties=props, propertiesRaw=raw,
                      flag=flag, bornTimestamp=born_timestamp, bornHost=born_host, storeHost=store_host,
                      storeTimestamp=store_timestamp)
