"""The egress proxy: the one way out of a sandbox whose environment allows network access (HTTP
proxy and CONNECT over a unix socket the sandbox sees), enforcing the session's network policy
and adding its bound credentials to requests on the way out."""
