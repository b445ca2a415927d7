"""Takes as reusable data: record, replay (offline, deterministic), export (.npz reference clips)."""
