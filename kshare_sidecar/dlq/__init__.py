"""Dead-letter topics as tools see them: records with their ``__dlq.errors.*`` context (records),
reading them from the backend (reader), and moving them back (redrive). Used by the console and
``kshare dlq``; over aiokafka, independent of the sidecar's serving layers (wire/, api/, group/, share/)."""
