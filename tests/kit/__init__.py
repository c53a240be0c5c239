"""Test kits shared by the test folders (engine scenarios, workloads, wire strategies)."""
