"""The sidecar's asyncio services: the thin layer that joins the pure engine and coordinator
to the backend (backend/) and the persister (persist/). Handlers in api/ call these; kshare_sidecar/app.py
builds them and hands them to the handlers, so nothing here imports api/ or wire/."""
