"""The fleet analytics pipeline: archive the ``events`` topic to Parquet, report on it.

events.py      the archived event schema and the validation of one log record (pure)
archive.py     the archiver: events topic -> Parquet partitioned by date, exactly once
metrics.py     what every report figure means, computed in one process (the reference)
spark_job.py   the same figures computed by Spark, for history too large for one box
session.py     a quiet, offline SparkSession sized for a small machine
output.py      tables to CSV and Parquet, PNG charts, one self-contained HTML page
demo.py        realistic synthetic event histories
"""
