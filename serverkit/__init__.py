"""What both halves of the server share and the client does not need (the layer between them and
the `astrabox` SDK): the process's logging set-up (`logs`), how its settings are declared and
read (`settings`), what a started process does with its heap (`heap`), and what an environment's
host patterns (`host_patterns`) and credential bindings (`credential_reach`) reach."""
