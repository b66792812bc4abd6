"""Durable share-group state: the persisted model, the persister protocol and built-in persisters."""
