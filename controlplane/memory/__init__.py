"""MemoryService: a project's memory stores of versioned text documents, attached to sessions.

paths.py     what a document's path and content may be (the hostile-input rules)
stores.py    the stores and their documents: written, read at a version or a time, listed,
             restored to a time; what a session mounts and what its turns write back
api.py       the gRPC servicer: protobuf in, `MemoryStores` calls in the caller's project
"""
