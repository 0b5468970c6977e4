"""Samza-style stateful event-time window operators on RocksDB, over Kafka and Spark."""

__version__ = "0.1.0"
