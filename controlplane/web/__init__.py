"""The web API and the console: every client-facing RPC over the Connect protocol on an HTTP port of
its own (--web-listen), for browsers and curl, and the console's files at /.

    serving   the HTTP server and the private socket it reaches the gRPC server by
    gateway   an HTTP request → one gRPC call on this control plane's own server
    connect   the Connect wire format: codecs, envelopes, timeouts, error JSON
    origins   which browser origins may call
    console   the built console's files
"""
