"""raydex.actors."""
