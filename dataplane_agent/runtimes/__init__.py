"""Session runtimes: a sandbox plus a connected engine, started, stopped, recovered and reconciled."""
