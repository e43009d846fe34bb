"""Persistence: the committed baseline files (format, atomic writes under a lock, the store)."""
