"""Apache Airflow provider for incremental, version-ranged loads of Delta Lake tables with Spark."""

__version__ = "0.1.0"
