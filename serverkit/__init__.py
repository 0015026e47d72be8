"""What both halves of the server share and the client does not need (the layer between them and
the `astrabox` SDK): today the process's logging set-up (`logs`)."""
