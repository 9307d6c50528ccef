"""Sample stores: realistic ones generated through the one writer (``generate``: 4.9.4 delay
levels and retries; ``generate_timer``: a 5.x store with timer traffic, whose timer store
``timerstore`` writes), and the real-broker stores kept packed in the repository (``pack``)."""
