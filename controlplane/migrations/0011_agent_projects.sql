-- An agent dedicated to a project runs only that project's sessions; NULL: the
-- shared pool, which runs any project's. A project's sessions go to its own
-- agents first, then to the shared pool.
ALTER TABLE agents ADD COLUMN project_id uuid REFERENCES projects (project_id);
