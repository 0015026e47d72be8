"""The chaos suite: real processes, random faults, then every promise of the platform checked.

Runs, on this machine, an embedded PostgreSQL, control-plane replicas and data-plane agents
(local bubblewrap driver, or `--driver docker`) as separate processes, the offline model, and
clients that watch every session through a TCP proxy that cuts and stalls connections; each
agent's Runner stream goes through a proxy of its own. For `--duration` seconds, actors create
sessions and drive them (tools, questions, approvals, long steps, background tasks, interrupts,
per-message permission modes, idle stops, archive and delete) while faults are injected one
after another (see `faults`). Then the faults stop, every process runs, open turns get
`--settle` seconds to end and the platform `--quiet` seconds of nothing happening, and the
checks run (see `checks`). Prints the figures; exits 1 on any violation, with the violating
sessions and an example's journal tail.

    proxy       the cutting, stalling TCP proxy
    cluster     the processes: PostgreSQL, replicas, agents; kill and start again
    driver      the actors (users) and their sessions; calls.py and watchers.py their clients
    faults      the faults and their schedule
    journal     what PostgreSQL holds after the round
    sandboxes   what the hosts hold after the round
    checks      the checks
    report      the figures and the violations
"""
