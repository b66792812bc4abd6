"""The backend cluster: topic metadata with stable topic IDs, raw record-batch reads, offsets.

The only package that talks to the backend's user topics. Record data moves as bytes.
"""
