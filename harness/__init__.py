"""The harness: CLI, pytest plugin, PostgreSQL provisioning, receipts and the gate."""
