"""What users touch: the REST API and console, the CLI, the scheduler, and `opsgraph run`."""

__all__: list[str] = []
