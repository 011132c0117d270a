-- The boot registry (issue 15, M11: several Vessels on one database, beyond
-- seed 000_81a5c720b14d934a.txt's single-process topology). Each boot of a
-- Vessel holds a lease it renews; another boot's claimed work is fenced and
-- reconciled only once that lease has expired by the database's own clock.
-- A new table only: live Runs do not block this migration.

CREATE TABLE vessel_boot (
    boot_id text PRIMARY KEY,
    started_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL
);
