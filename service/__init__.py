"""posenc HTTP front end (FastAPI app over the engine's shared-memory tables)."""
