"""The server's composition root: the one package that imports both halves of the server.

`controlplane` and `dataplane_agent` meet only on the Runner stream; the
all-in-one stack behind `astrabox up` and `astrabox demo` (`stack`) is where
one process runs both, and so the only code that imports both.
"""
