"""Client quotas (Kafka's ClientQuotaManager for ShareFetch): the model and the backend's quotas."""
