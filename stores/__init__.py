"""RocksDB-backed state stores of the window operator (key schema, window meta, messages)."""
