"""The 4.x delay levels of SCHEDULE_TOPIC_XXXX: per-level status, the offsets in
delayOffset.json and how to move them, and the level scheduler that delivers them (the level
table itself is the store's: rmqdelay.store.levels)."""
