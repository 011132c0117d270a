"""Recovery after process death: startup reconciliation and maintenance relays."""
