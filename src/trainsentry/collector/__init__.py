"""The collector: accepts signed batches from node agents into SQLite and serves them back.

``schema`` (tables + migrations) → ``store`` (the write path: auth, chain, commit) → ``app`` (HTTP)
→ ``query`` (read path) ; ``hooks`` lets live processing subscribe to committed batches;
``server`` runs it under uvicorn. See docs/collector.md.
"""
