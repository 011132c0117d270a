"""The Vessel application: profiles that wire adapters to the run engine."""
