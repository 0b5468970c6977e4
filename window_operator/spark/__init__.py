"""Spark Structured Streaming integration: the Kafka source, the session and the job driver.

Nothing outside this package imports Spark: operators and stores run without it.
"""
