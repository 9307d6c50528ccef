"""What an operator does next in an incident, offline: move a consumer group's committed
offsets (reset.py), its dead letters - why each died, export them, put them back
(deadletters.py) - and what the broker's retention will take before it is read (retention.py)."""
