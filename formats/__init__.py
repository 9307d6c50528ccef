"""Byte layouts of a RocketMQ broker store: pure, no file I/O.

Every definition here parses and builds; the spec tables in the docs name the fields.
"""
