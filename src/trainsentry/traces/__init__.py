"""Trace format: Parquet samples + a JSON manifest per run (see :mod:`.schema`, :mod:`.io`)."""
