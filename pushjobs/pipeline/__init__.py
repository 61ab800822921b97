"""The fleet analytics pipeline: archive the ``events`` topic to Parquet, report on it.

events.py          the archived event schema and the validation of one log record (pure)
archive.py         the archiver: events topic -> Parquet partitioned by date, exactly once
metrics.py         what every report figure means, computed in one process (the reference)
uptime.py          availability, flaps, outages and server downtime: the reference (pure)
spark_job.py       the same figures computed by Spark, for history too large for one box
spark_liveness.py  availability and server downtime on Spark
session.py         a quiet, offline SparkSession sized for a small machine
output.py          the tables, worst first, as CSV and Parquet, and the summary
charts.py          PNG charts that answer an operator's questions
page.py            one self-contained, offline HTML page with sortable, filterable tables
demo.py            realistic synthetic event histories
"""
