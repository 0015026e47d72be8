"""A sandbox's files and commands, served for the control plane's workspace RPCs."""
