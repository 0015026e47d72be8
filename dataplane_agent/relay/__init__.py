"""The agent's end of `RunnerService.Connect`: the stream, the outbox behind it, and the commands it brings."""
