"""Restart receipts: real two-boot PostgreSQL lifecycles, one per crash window.

DESIGN section 7. For a window, boot 1 (a real `vessel serve` with
`VESSEL_CRASH_AT`) is driven over HTTP into the window and dies by SIGKILL
there; the ledger and SAQ tables are snapshotted; boot 2 starts without a
plan, reconciles, and is driven to the Run's end; the simulator's checker
runs over the PostgreSQL ledger; the window's expected outcome is asserted;
a JSON receipt and an index (index.md, index.html, index.json) are written.
"""
