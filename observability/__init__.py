"""raydex.observability."""
