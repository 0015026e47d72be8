"""One session's engine and the turns that run on it (`session.SessionTurns` puts the parts together)."""
