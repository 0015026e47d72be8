"""The warm pool: sandboxes, each with its engine started, ready ahead of the sessions that claim them."""
