"""The provider's Airflow UI plugin: the "Delta tables" page (Airflow >= 3.1)."""
