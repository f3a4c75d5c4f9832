"""The Spark job the operators submit: its spec, its driver program and its sinks."""
