-- Whether the session's runtime was stopped while idle (engine closed, sandbox
-- stopped, files kept): set by the agent's RuntimeStopped, cleared by its next
-- RuntimeStarted. runtime_available stays true meanwhile: the next message goes
-- to the same agent, which starts the runtime again in place.
ALTER TABLE sessions ADD COLUMN runtime_stopped boolean NOT NULL DEFAULT false;
