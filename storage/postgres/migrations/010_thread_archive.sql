-- A thread can be archived: it leaves the owner's thread list (unless the
-- list asks for archived ones too) and keeps its log, readable and
-- writable as before. CopilotKit's thread routes archive threads.
ALTER TABLE threads ADD COLUMN archived boolean NOT NULL DEFAULT false;
