"""Mutation testing of `runtime/` core with the simulator as the killer (issue M9).

cosmic-ray mutates one site of a core module at a time, in a private copy of
the tree (`out/mutation/tree`), and runs `killer` there: a focused simulator
campaign that runs seeds in order and stops at the first violation, so each
killed mutant carries its seeds-to-detection. `run` drives the sessions (one
per module group of `ci/mutation.toml`), `filters` excludes equivalent
mutants and draws the CI sample, `report` writes `report.md` / `report.json`.
"""
