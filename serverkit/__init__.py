"""What both halves of the server share and the client does not need (the layer between them and
the `astrabox` SDK): the process's logging set-up (`logs`), how its settings are declared and
read (`settings`), and what a started process does with its heap (`heap`)."""
