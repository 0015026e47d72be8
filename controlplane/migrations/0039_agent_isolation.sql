-- How each agent's sandboxes are isolated from its host (Hello.isolation): 'gvisor' (the docker
-- driver under runsc), 'container' (runc), 'bubblewrap' (the local driver), '' from an agent older
-- than the field. An environment with isolation 'gvisor' is placed only on agents saying 'gvisor'.
ALTER TABLE agents ADD COLUMN isolation text NOT NULL DEFAULT '';
