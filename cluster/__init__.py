"""raydex.cluster."""
