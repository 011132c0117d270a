"""An example shop: a checkout workflow on the Vessel runtime, tested under the
simulator through the public harness API (harness.api)."""
