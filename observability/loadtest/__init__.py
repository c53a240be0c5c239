"""The loadtest environment: workload, load generator, instrumentation, reports, the demo."""
