"""MemoryService: a project's memory stores of versioned text documents, attached to sessions.

paths.py     what a document's path and content may be (the hostile-input rules)
stores.py    the stores and their documents: written, read at a version or a time, listed,
             restored to a time, within their bounds
sessions.py  what a session has of them: its attachments, what its sandbox gets at each start,
             what its turns write back (attributed, conflicts kept)
api.py       the gRPC servicer: protobuf in, `MemoryStores` calls in the caller's project
"""
