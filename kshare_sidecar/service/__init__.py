"""The sidecar's asyncio services: the thin layer that joins the pure engine and coordinator
to the backend (log/) and the persister (persist/). Handlers in api/ call these."""
